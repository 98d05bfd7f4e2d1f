package mesh

import (
	"context"
	"encoding/binary"
	"io"
	"log"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/statedoc"
)

// startReal starts a member on 127.0.0.1 with real UDP and TCP sockets.
func startReal(t *testing.T, name string, role api.Role, seeds ...string) *Mesh {
	t.Helper()
	return startRealWith(t, testSecret, name, role, seeds...)
}

// startForeign starts an agent of another mesh (its own secret) on 127.0.0.1, joining seeds.
func startForeign(t *testing.T, name string, seeds ...string) *Mesh {
	t.Helper()
	return startRealWith(t, make([]byte, api.SecretSize), name, api.RoleAgent, seeds...)
}

func startRealWith(t *testing.T, secret []byte, name string, role api.Role, seeds ...string) *Mesh {
	t.Helper()
	cfg := Config{
		MeshID: "test", Secret: secret, NodeName: name, Role: role, Profile: ProfileLocal,
		BindAddr: "127.0.0.1", Seeds: seeds, Log: testLog(),
		DialBack: func(context.Context, string) error { return nil },
	}
	if role == api.RoleAgent {
		cfg.APIAddr = "127.0.0.1:1"
	}
	m, err := Start(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { m.Shutdown() })
	return m
}

// rawMeta is a memberlist delegate that gossips whatever metadata bytes it is given: a member
// with the key but its own (buggy or hostile) build.
type rawMeta []byte

func (r rawMeta) NodeMeta(int) []byte               { return r }
func (rawMeta) NotifyMsg([]byte)                    {}
func (rawMeta) GetBroadcasts(int, int) [][]byte     { return nil }
func (rawMeta) LocalState(bool) []byte              { return nil }
func (rawMeta) MergeRemoteState(buf []byte, _ bool) {}

// keyholder joins the mesh at seed as a bare memberlist node holding the mesh key.
func keyholder(t *testing.T, name string, meta []byte, seed string) *memberlist.Memberlist {
	t.Helper()
	c := memberlist.DefaultLocalConfig()
	c.Name = name
	c.BindAddr, c.BindPort, c.AdvertisePort = "127.0.0.1", 0, 0
	c.SecretKey = api.GossipKey(testSecret)
	c.Label = api.GossipLabel("test", testSecret)
	c.Delegate = rawMeta(meta)
	c.Logger = log.New(io.Discard, "", 0)
	ml, err := memberlist.Create(c)
	require.NoError(t, err)
	t.Cleanup(func() { ml.Shutdown() })
	_, err = ml.Join([]string{seed})
	require.NoError(t, err)
	return ml
}

// TestAbsurdMemberIsTamed: a keyholder whose metadata and state document say absurd things —
// committed memory far above the total, escape sequences in every string — is shown with its
// figures clamped and its strings printable, and a node name that is no node name is refused.
func TestAbsurdMemberIsTamed(t *testing.T) {
	console := startReal(t, "console", api.RoleConsole)
	evil := startReal(t, "evil", api.RoleAgent, console.GossipAddr())
	const esc = "\x1b]0;owned\x07\x1b[2J"
	h := hostOf(math.MaxInt64)
	h.Memory.Total, h.Memory.Reserved, h.Memory.Budget = 1, math.MaxInt64, -5
	h.OS, h.Chip = "linux"+esc, "chip"+esc
	p := placement("p1", "model"+esc, api.StateReady)
	p.Memory.Bytes, p.TokensPerS = math.MaxInt64, 1e308
	require.NoError(t, evil.SetLocal(h, []api.Placement{p}))

	// Raw metadata: every memory figure at the largest uvarint an int64 holds, and a chip name
	// full of escapes.
	meta := []byte{metaVersion}
	meta = appendField(meta, tagRole, []byte{0})
	var mem []byte
	for range 5 {
		mem = binary.AppendUvarint(mem, math.MaxInt64)
	}
	meta = appendField(meta, tagMemory, mem)
	meta = appendField(meta, tagChip, []byte("raw"+esc))
	meta = appendField(meta, tagAPIAddr, []byte("127.0.0.1:1"))
	keyholder(t, "raw", meta, console.GossipAddr())
	keyholder(t, "BAD\x1b[2Jname", meta, console.GossipAddr())

	waitFor(t, 10*time.Second, []*Mesh{console}, "the console sees both agents", func(v View) bool {
		mb, ok := v.Member("evil")
		return ok && len(mb.Placements) == 1 && allAlive("raw")(v)
	})
	v := console.View()
	for _, mb := range v.Members {
		require.NotContains(t, mb.Name, "\x1b", "a name that is no node name got in")
		if mb.Host == nil {
			continue
		}
		m := mb.Host.Memory
		for _, f := range []int64{m.Total, m.Budget, m.Committed, m.Reserved, m.Available} {
			require.True(t, f >= 0 && f <= statedoc.MaxBytes, "%s: figure %d", mb.Name, f)
		}
		// A hundred such hosts still add up.
		require.Less(t, m.Committed, int64(math.MaxInt64/100))
		for _, s := range []string{mb.Host.OS, mb.Host.Chip} {
			require.False(t, strings.ContainsAny(s, "\x1b\x07"), "%s: %q", mb.Name, s)
		}
		for _, p := range mb.Placements {
			require.False(t, strings.ContainsAny(p.Model, "\x1b\x07"), p.Model)
			require.LessOrEqual(t, p.Memory.Bytes, int64(statedoc.MaxBytes))
		}
	}
	raw, _ := v.Member("raw")
	require.Equal(t, "raw", raw.Host.Chip, "the escape sequences are removed whole")
	_, bad := v.Member("BAD\x1b[2Jname")
	require.False(t, bad)
}

// TestForgedLivenessCannotOutrankANode: a member with the key gossips a suspicion and a leave
// of another node with the largest sequence there is, meant to outrank all its later notices.
// Nobody believes them: the node is never shown suspect, and its real graceful leave later is
// shown as a leave, not a death.
func TestForgedLivenessCannotOutrankANode(t *testing.T) {
	a := startReal(t, "a", api.RoleAgent)
	b := startReal(t, "b", api.RoleAgent, a.GossipAddr())
	evil := startReal(t, "evil", api.RoleAgent, a.GossipAddr())
	waitFor(t, 10*time.Second, []*Mesh{a, b, evil}, "formed", allAlive("a", "b", "evil"))
	seen := history(t, a, "b")
	for _, kind := range []byte{liveSuspect, liveLeave} {
		n := liveNotice{Kind: kind, Seq: math.MaxUint64, Node: "b", From: "evil"}
		evil.queue.QueueBroadcast(&broadcast{name: "forged:" + string(rune('0'+kind)), msg: encodeLive(n)})
		evil.sendTo("a", a.GossipAddr(), encodeLive(n))
	}
	require.Never(t, func() bool {
		for _, l := range seen() {
			if l != api.Alive {
				return true
			}
		}
		return false
	}, time.Second, 20*time.Millisecond, "a forged notice changed b's liveness")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	require.NoError(t, b.Close(ctx))
	waitFor(t, 10*time.Second, []*Mesh{a}, "b's real leave is believed", func(v View) bool { return liveness(v, "b") == api.Left })
}
