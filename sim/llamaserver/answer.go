package llamaserver

import (
	"strings"
)

// stopper applies stop strings to streamed text the way llama-server does: text that might be
// the start of a stop string is held back until it is known not to be one, and nothing from the
// stop string on is ever sent.
type stopper struct {
	stops []string
	text  strings.Builder
	sent  int
}

// add appends a token and returns the text that is now safe to send, and whether a stop string
// was found (generation must end).
func (s *stopper) add(tok string) (string, bool) {
	s.text.WriteString(tok)
	all := s.text.String()
	for _, stop := range s.stops {
		if stop == "" {
			continue
		}
		if i := strings.Index(all[s.sent:], stop); i >= 0 {
			out := all[s.sent : s.sent+i]
			s.sent = len(all)
			return out, true
		}
	}
	hold := 0
	for _, stop := range s.stops {
		for k := min(len(stop)-1, len(all)-s.sent); k > hold; k-- {
			if strings.HasSuffix(all, stop[:k]) {
				hold = k
				break
			}
		}
	}
	out := all[s.sent : len(all)-hold]
	s.sent = len(all) - hold
	return out, false
}

// flush returns the held-back text once generation has ended without a stop string.
func (s *stopper) flush() string {
	all := s.text.String()
	out := all[s.sent:]
	s.sent = len(all)
	return out
}
