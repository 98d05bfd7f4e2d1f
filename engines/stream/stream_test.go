package stream

import (
	"encoding/json"
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

// TestReadyThenLine: a Line after Ready (which remembers where the whole line it found ends)
// reads what a Line alone reads, however the body's bytes arrive.
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
		r.Close()
		assert.Equal(t, want, got, "pieces of %d bytes", piece)
		if piece == 64 {
			// Nothing is buffered before the first Line; after it, all of the body is.
			assert.Equal(t, 4, whole, "every line after the first but the unterminated last was whole")
		}
	}
}

// SkipBlank takes the blank line after an event when it is at hand, "\n" or "\r\n", and
// nothing else: a line that is not blank, or a blank line still to arrive, is read by Line.
func TestSkipBlank(t *testing.T) {
	const body = "data: one\n\ndata: two\r\n\r\ndata: three\n\n\ndata: four\nnot blank\n\r"
	for _, piece := range []int{1, 2, 3, 7, 64} {
		r := NewReader(&pieces{s: body, n: piece}, 1<<10)
		var got []string
		for {
			line, err := r.Line()
			got = append(got, string(line))
			if err == io.EOF {
				break
			}
			require.NoError(t, err)
			r.Ready() // the line end it remembers is forgotten by SkipBlank, not misused
			r.SkipBlank()
		}
		r.Close()
		if piece == 64 { // all of it buffered: every separator is taken, one at a time
			assert.Equal(t, []string{"data: one", "data: two", "data: three", "", "data: four", "not blank", ""}, got)
		}
		// In any pieces, the lines that are not blank come in order, and none is lost.
		var text []string
		for _, l := range got {
			if l != "" {
				text = append(text, l)
			}
		}
		assert.Equal(t, []string{"data: one", "data: two", "data: three", "data: four", "not blank"}, text, "pieces of %d bytes", piece)
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

// String reads what encoding/json reads, or declines.
func FuzzString(f *testing.F) {
	for _, s := range []string{`"plain"`, `"esc\"aped\n\u00e9"`, `"é"`, "\"\xff\"", `"` + "\u2028" + `"`, `"ctl` + "\x01" + `"`, `"open`, `"bad\q"`, `"\ud800"`} {
		f.Add(s + `,"x":1}`)
	}
	f.Fuzz(func(t *testing.T, data string) {
		s, end, ok := String([]byte(data), 0)
		if !ok {
			return
		}
		var want string
		require.NoError(t, json.Unmarshal([]byte(data[:end]), &want), "accepted %q", data[:end])
		assert.Equal(t, want, s)
	})
}

func TestHasMember(t *testing.T) {
	assert.True(t, HasMember([]byte(`{"a":1,"usage":{}}`), "usage"))
	assert.True(t, HasMember([]byte(`{"UsAgE":{}}`), "usage"), "encoding/json matches names without regard to case")
	assert.True(t, HasMember([]byte(`{"a":"x y"}`), "usage"), "not compact: judged as possibly there")
	assert.True(t, HasMember([]byte(`{"u\u0073age":1}`), "usage"), "an escape could spell it")
	assert.True(t, HasMember([]byte(`{"uſage":1}`), "usage"), "a Unicode fold could spell it")
	assert.False(t, HasMember([]byte(`{"usages":1,"model":"m"}`), "usage"))
	assert.False(t, HasMember([]byte(`{"id":"x","created":1}`), "usage", "error"))
}

func BenchmarkHasMember(b *testing.B) {
	line := []byte(`{"model":"llama3.2:1b","created_at":"2026-12-01T12:00:00.123456789Z","message":{"role":"assistant","content":" word"},"done":false}`)
	for b.Loop() {
		HasMember(line, "error")
	}
}

func TestMembers(t *testing.T) {
	var names, values []string
	ok := Members([]byte(`{"a":[1,{"b":"}"}],"s":"x,y","n":-1.5e3,"o":{"c":{}},"t":true}`), func(name, v []byte) bool {
		names, values = append(names, string(name)), append(values, string(v))
		return true
	})
	assert.True(t, ok)
	assert.Equal(t, []string{"a", "s", "n", "o", "t"}, names)
	assert.Equal(t, []string{`[1,{"b":"}"}]`, `"x,y"`, `-1.5e3`, `{"c":{}}`, `true`}, values)
	assert.True(t, Members([]byte(`{}`), func(_, _ []byte) bool { t.Fatal("no members"); return false }))
	for _, doc := range []string{`{"a": 1}`, `{"a":"\u0041"}`, `{"é":1}`, `[1]`, `{"a":1`, `{"a"}`, `{"a":}`, `{"a":"x}`} {
		assert.False(t, Members([]byte(doc), func(_, _ []byte) bool { return true }), doc)
	}
}
