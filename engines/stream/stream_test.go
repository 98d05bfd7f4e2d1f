package stream

import (
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReader(t *testing.T) {
	long := strings.Repeat("x", 40<<10) // longer than the buffer
	r := NewReader(strings.NewReader("one\r\n\n"+long+"\nlast"), 64<<10)
	for _, want := range []string{"one", "", long} {
		line, err := r.Line()
		require.NoError(t, err)
		assert.Equal(t, want, string(line))
	}
	assert.False(t, r.Ready(), "an unterminated line is not whole")
	line, err := r.Line()
	assert.Equal(t, io.EOF, err)
	assert.Equal(t, "last", string(line))

	r = NewReader(strings.NewReader(long+"\n"), 1<<10)
	_, err = r.Line()
	assert.ErrorContains(t, err, "a line over 1024 bytes")
}

// Ready tells a whole line at hand from one still to arrive, however the body's bytes arrive,
// and the lines read are the same with it as without.
func TestReadyThenLine(t *testing.T) {
	const body = "data: one\r\n\ndata: two\n\n" + "data: three\nlast"
	want := []string{"data: one", "", "data: two", "", "data: three", "last"}
	for _, piece := range []int{1, 2, 3, 7, 64} {
		r := NewReader(&pieces{s: body, n: piece}, 1<<10)
		var got []string
		whole := 0
		for {
			if r.Ready() {
				whole++
			}
			line, err := r.Line()
			got = append(got, string(line))
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
		}
		assert.Equal(t, want, got, "pieces of %d bytes", piece)
		if piece == 64 {
			// Nothing is buffered before the first Line; after it, all of the body is.
			assert.Equal(t, 4, whole, "every line after the first but the unterminated last was whole")
		}
	}
}

// pieces reads s n bytes at a time.
type pieces struct {
	s string
	n int
}

func (p *pieces) Read(b []byte) (int, error) {
	if p.s == "" {
		return 0, io.EOF
	}
	n := copy(b[:min(len(b), p.n)], p.s)
	p.s = p.s[n:]
	return n, nil
}
