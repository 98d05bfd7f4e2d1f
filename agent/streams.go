package agent

import (
	"sync"

	"github.com/llmkube/mesh/agent/api"
)

// Event streams are long-lived connections, so they are counted: at most maxEventSubs in all,
// at most maxNamespaceStreams for one namespace token, and the namespaces together never more
// than maxEventSubs-adminStreams, so a token holder (or several) cannot lock the operator out of
// the agent's events.
const (
	maxNamespaceStreams = 16
	adminStreams        = 32
)

// streamSlots hands out event-stream slots by principal.
type streamSlots struct {
	mu    sync.Mutex
	total int
	byNS  map[string]int
	nsAll int
}

// acquire takes a slot for who, or says why there is none; release gives it back.
func (s *streamSlots) acquire(who api.Principal) (release func(), err *api.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.total >= maxEventSubs {
		return nil, api.Errorf(api.CodeTooBusy, "too many event streams open (%d)", maxEventSubs)
	}
	if !who.Admin {
		if s.byNS[who.Namespace] >= maxNamespaceStreams {
			return nil, api.Errorf(api.CodeTooBusy, "this token already holds %d event streams, the most a namespace token may", maxNamespaceStreams)
		}
		if s.nsAll >= maxEventSubs-adminStreams {
			return nil, api.Errorf(api.CodeTooBusy, "namespace tokens hold all the event streams they may (%d)", maxEventSubs-adminStreams)
		}
		if s.byNS == nil {
			s.byNS = map[string]int{}
		}
		s.byNS[who.Namespace]++
		s.nsAll++
	}
	s.total++
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.total--
		if !who.Admin {
			s.nsAll--
			if s.byNS[who.Namespace]--; s.byNS[who.Namespace] == 0 {
				delete(s.byNS, who.Namespace)
			}
		}
	}, nil
}

// open is how many streams are open.
func (s *streamSlots) open() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.total
}
