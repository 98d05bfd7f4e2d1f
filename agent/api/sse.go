package api

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// ErrSSEDone, returned by ReadSSE's onData, ends the stream cleanly (an OpenAI "data: [DONE]").
var ErrSSEDone = errors.New("stream done")

// ReadSSE reads a text/event-stream and calls onData with each event's data (multi-line data
// joined with "\n"; "data:x" and "data: x" alike, as the standard says); comments and other
// fields are skipped, and a last event without its blank line still counts. A line is bounded
// (4 MiB). Clients of the agents' events and the gateway's answers, and the route probe's check
// of an engine's stream, read with it; the llama-server driver reads its engine's stream
// itself, to pass on at once the pieces that arrive together.
func ReadSSE(r io.Reader, onData func([]byte) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var data []byte
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if data != nil {
				err := onData(data)
				data = nil
				if err == ErrSSEDone {
					return nil
				}
				if err != nil {
					return err
				}
			}
			continue
		}
		if v, ok := bytes.CutPrefix(line, []byte("data:")); ok {
			v = bytes.TrimPrefix(v, []byte(" "))
			if data != nil {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	if data != nil {
		if err := onData(data); err != nil && err != ErrSSEDone {
			return err
		}
	}
	return nil
}
