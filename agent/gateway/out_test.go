package gateway

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTailSeesTheStreamEnd: a forward knows it passed on an OpenAI stream's last event however
// the owner's bytes were cut into reads, and only when that event is the last thing sent.
func TestTailSeesTheStreamEnd(t *testing.T) {
	answer := `data: {"choices":[{"delta":{"content":"hi"}}]}` + "\n\n" + "data: [DONE]\n\n"
	for size := 1; size <= len(answer); size++ {
		var s tail
		for i := 0; i < len(answer); i += size {
			s.add([]byte(answer[i:min(i+size, len(answer))]))
		}
		require.True(t, s.ended(), "reads of %d bytes", size)
		s.add([]byte("\n"))
		require.False(t, s.ended(), "something after the last event")
	}
	var s tail
	s.add([]byte("data: [DONE]\n"))
	require.False(t, s.ended(), "the event not yet whole")
	s.add([]byte(`{"object":"chat.completion"}`))
	require.False(t, s.ended(), "a whole answer")
}
