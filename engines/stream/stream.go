// Package stream reads engines' streamed answers (NDJSON, server-sent events) line by line,
// telling whether the next line is already at hand, so a driver can set engines.ChatChunk.More.
package stream

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// Reader reads lines. A line is valid until the next call.
type Reader struct {
	br   *bufio.Reader
	long []byte // a line longer than br's buffer, assembled
	max  int
}

// NewReader reads body's lines of at most max bytes.
func NewReader(body io.Reader, max int) *Reader {
	return &Reader{br: bufio.NewReaderSize(body, 16<<10), max: max}
}

// Line is the next line without its end ("\n" or "\r\n"); at the end of the stream, what is
// left, with io.EOF. A line over the bound is an error.
func (r *Reader) Line() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err == bufio.ErrBufferFull {
		r.long = append(r.long[:0], line...)
		for err == bufio.ErrBufferFull {
			line, err = r.br.ReadSlice('\n')
			if len(r.long)+len(line) > r.max {
				return nil, fmt.Errorf("a line over %d bytes", r.max)
			}
			r.long = append(r.long, line...)
		}
		line = r.long
	}
	line = bytes.TrimSuffix(line, []byte("\n"))
	return bytes.TrimSuffix(line, []byte("\r")), err
}

// Ready reports whether a whole line is in the buffer: the next Line does not wait.
func (r *Reader) Ready() bool {
	b, _ := r.br.Peek(r.br.Buffered())
	return bytes.IndexByte(b, '\n') >= 0
}
