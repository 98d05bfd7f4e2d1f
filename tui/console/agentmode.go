package console

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
)

// agentSource watches the mesh through one agent's API: GET /v1/mesh, re-read every poll. It is
// for consoles that cannot join the gossip mesh (another subnet, a firewall).
type agentSource struct {
	client *apiclient.Client
	bell   *notifier
	log    *slog.Logger
	cancel context.CancelFunc
	done   chan struct{}

	mu   sync.Mutex
	last api.MeshView
	err  error // the last poll's failure, for the doctor
}

func newAgentSource(ctx context.Context, client *apiclient.Client, poll, timeout time.Duration, bell *notifier, log *slog.Logger) (*agentSource, error) {
	url := client.BaseURL
	s := &agentSource{client: client, bell: bell, log: log, done: make(chan struct{})}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	v, err := s.client.Mesh(cctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reading the mesh from %s: %w", url, err)
	}
	s.last = v
	pctx, stop := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = stop
	go s.poll(pctx, poll, timeout)
	return s, nil
}

func (s *agentSource) poll(ctx context.Context, every, timeout time.Duration) {
	defer close(s.done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		v, err := s.client.Mesh(cctx)
		cancel()
		s.mu.Lock()
		s.err = err
		changed := err == nil && !sameView(s.last, v)
		if err != nil {
			// The agent went away: nothing it said can be trusted as current, so its members
			// are shown as unreachable rather than as they were.
			changed = markStale(&s.last, err)
		} else if changed {
			s.last = v
		}
		s.mu.Unlock()
		if changed {
			s.bell.ring()
		}
	}
}

// sameView compares views ignoring the time they were taken.
func sameView(a, b api.MeshView) bool {
	a.At, b.At = time.Time{}, time.Time{}
	return reflect.DeepEqual(a, b)
}

// markStale marks every member unreachable and every placement unavailable; it reports whether
// anything changed.
func markStale(v *api.MeshView, err error) bool {
	changed := false
	for i := range v.Members {
		m := &v.Members[i]
		if m.Liveness != api.Unreachable {
			m.Liveness = api.Unreachable
			m.Reason = "the agent this console watches through does not answer: " + err.Error()
			changed = true
		}
		for j := range m.Placements {
			if m.Placements[j].State != api.StateUnavailable {
				m.Placements[j].Reason = "was " + string(m.Placements[j].State)
				m.Placements[j].Was, m.Placements[j].State = m.Placements[j].State, api.StateUnavailable
				changed = true
			}
		}
	}
	return changed
}

func (s *agentSource) view() api.MeshView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *agentSource) doctor(context.Context) Doctor {
	d := Doctor{Mode: "agent"}
	s.mu.Lock()
	err := s.err
	s.mu.Unlock()
	if err != nil {
		d.Findings = append(d.Findings, api.Finding{Severity: api.SeverityError,
			Problem: "the agent at " + s.client.BaseURL + " does not answer: " + err.Error(),
			Fix:     "check that llmkube-agent runs there and that its API port is open, or join the mesh with a join string instead of --agent"})
	}
	return d
}

func (s *agentSource) close(context.Context) error {
	s.cancel()
	<-s.done
	return nil
}
