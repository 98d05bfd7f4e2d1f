package mesh

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/streamguard"
)

// lockedBuffer collects a logger's output from memberlist's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Len()
}

// TestJunkOnTheGossipPortIsCountedNotLogged: anyone on the LAN can send datagrams to the gossip
// port. Each used to cost a line at ERROR; now they are counted by reason and logged at most
// once per reason and interval.
func TestJunkOnTheGossipPortIsCountedNotLogged(t *testing.T) {
	var logs lockedBuffer
	m, err := Start(context.Background(), Config{
		MeshID: "test", Secret: testSecret, NodeName: "a", Role: api.RoleConsole, Profile: ProfileLocal,
		BindAddr: "127.0.0.1", Log: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	require.NoError(t, err)
	t.Cleanup(func() { m.Shutdown() })
	base := logs.Len()

	c, err := net.Dial("udp", m.GossipAddr())
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	label := api.GossipLabel("test", testSecret)
	junk := bytes.Repeat([]byte{0x5a}, 80)
	const each = 100
	for i := range 3 * each {
		var pkt []byte
		switch i % 3 {
		case 0: // no label at all
			pkt = junk
		case 1: // another mesh's label
			pkt = append([]byte{streamguard.HasLabelMsg, 5}, "other"...)
			pkt = append(pkt, junk...)
		case 2: // our label, not our key
			pkt = append([]byte{streamguard.HasLabelMsg, byte(len(label))}, label...)
			pkt = append(pkt, 1) // encryption version 1, then garbage
			pkt = append(pkt, junk...)
		}
		_, err := c.Write(pkt)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		d := m.GossipStats().Dropped
		return d[dropLabel] == 2*each && d[dropDecrypt] == each
	}, 5*time.Second, 10*time.Millisecond, "drops counted: %v", m.GossipStats().Dropped)
	require.Less(t, logs.Len()-base, 1024, "300 junk datagrams wrote %d bytes of log", logs.Len()-base)
}
