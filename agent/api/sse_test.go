package api

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadSSE(t *testing.T) {
	in := ": heartbeat\n\nevent: placement\nid: 4\ndata: {\"a\":1}\n\ndata: line1\ndata: line2\n\ndata: tail"
	var got []string
	require.NoError(t, ReadSSE(strings.NewReader(in), func(b []byte) error {
		got = append(got, string(b))
		return nil
	}))
	assert.Equal(t, []string{`{"a":1}`, "line1\nline2", "tail"}, got)

	// The route probe's own reader counted only "data: " with the space.
	got = nil
	require.NoError(t, ReadSSE(strings.NewReader("data:{}\n\ndata:[DONE]\n\n"), func(b []byte) error {
		got = append(got, string(b))
		return nil
	}))
	assert.Equal(t, []string{"{}", "[DONE]"}, got)
}
