package console

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh"
	"github.com/llmkube/mesh/mesh/discovery"
)

// memberSource is a console that joined the gossip mesh: its view is memberlist's, refreshed
// on every change, and it leaves gracefully when closed.
type memberSource struct {
	m    *mesh.Mesh
	stop func()
	done chan struct{}

	mu   sync.Mutex
	last api.MeshView
}

func newMemberSource(ctx context.Context, join api.Join, opts Options, id *seal.Identity, bell *notifier) (*memberSource, error) {
	var newDisc func(string, int) (discovery.Source, error)
	if opts.MDNS {
		// Made once the member has its name (given or generated): mDNS needs it to tell its
		// own answers from others'. A console only browses, so its gossip port is any free one.
		newDisc = func(node string, _ int) (discovery.Source, error) {
			return discovery.NewMDNS(discovery.MDNSConfig{MeshID: join.MeshID, Node: node, BrowseOnly: true,
				Interface: opts.MDNSInterface, Log: opts.Log.With(slog.String("part", "mdns"))})
		}
	}
	seeds := append(append([]string(nil), join.Seeds...), opts.Seeds...)
	bind := opts.Bind
	if bind == "" && allLoopback(seeds) && !opts.MDNS {
		bind = "127.0.0.1"
	}
	m, err := mesh.Start(context.WithoutCancel(ctx), mesh.Config{
		MeshID:       join.MeshID,
		Secret:       join.Secret,
		NodeName:     opts.NodeName,
		Role:         api.RoleConsole,
		BindAddr:     bind,
		Seeds:        seeds,
		NewDiscovery: newDisc,
		Profile:      opts.Profile,
		Seal:         id,
		Log:          opts.Log.With(slog.String("part", "mesh")),
	})
	if err != nil {
		return nil, fmt.Errorf("joining mesh %s: %w", join.MeshID, err)
	}
	views, stop := m.Subscribe()
	s := &memberSource{m: m, stop: stop, done: make(chan struct{}), last: m.View().MeshView}
	go func() {
		defer close(s.done)
		for v := range views {
			s.mu.Lock()
			s.last = v.MeshView
			s.mu.Unlock()
			bell.ring()
		}
	}()
	return s, nil
}

// allLoopback reports whether there are seeds and every one is on loopback: then the mesh is
// on this machine and the console need not (and must not) listen on the LAN.
func allLoopback(seeds []string) bool {
	if len(seeds) == 0 {
		return false
	}
	for _, s := range seeds {
		host, _, err := net.SplitHostPort(s)
		if err != nil {
			return false
		}
		if host == "localhost" {
			continue
		}
		ip := net.ParseIP(host)
		if ip == nil || !ip.IsLoopback() {
			return false
		}
	}
	return true
}

func (s *memberSource) view() api.MeshView {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

func (s *memberSource) doctor(ctx context.Context) Doctor {
	return Doctor{Mode: "member", Node: s.m.LocalNode(), Findings: s.m.Doctor(ctx).Findings}
}

func (s *memberSource) close(ctx context.Context) error {
	err := s.m.Close(ctx)
	s.stop()
	return err
}
