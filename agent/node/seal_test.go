package node

import (
	"bytes"
	"crypto/tls"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
)

func testJoin(b byte) api.Join {
	return api.Join{MeshID: "home", Secret: bytes.Repeat([]byte{b}, api.SecretSize)}
}

func TestIdentityKeepsItsKeyAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	first, err := Identity(testJoin(1), "alpha", seal.RoleAgent, dir, "10.0.0.5:7777")
	require.NoError(t, err)
	again, err := Identity(testJoin(1), "alpha", seal.RoleAgent, dir, "10.0.0.5:7777")
	require.NoError(t, err)
	require.Equal(t, first.KeyID(), again.KeyID(), "a restart changed the key peers know")
	fi, err := os.Stat(filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	console, err := Identity(testJoin(1), "laptop", seal.RoleConsole, "", "")
	require.NoError(t, err)
	require.NotEqual(t, first.KeyID(), console.KeyID())

	require.NoError(t, os.WriteFile(filepath.Join(dir, KeyFile), []byte("garbage"), 0o600))
	_, err = Identity(testJoin(1), "alpha", seal.RoleAgent, dir, "")
	require.ErrorContains(t, err, "delete it")
}

func TestTheDoctorNamesAHostRefusedAtTheHandshake(t *testing.T) {
	id, err := Identity(testJoin(1), "alpha", seal.RoleAgent, t.TempDir(), "127.0.0.1:0")
	require.NoError(t, err)
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := seal.Listen(inner, seal.ListenConfig{TLS: id.ServerConfig()})
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	require.Empty(t, refusals(l, "alpha", time.Now()))

	// An agent of the same mesh id keyed with another secret (an old join string).
	stranger, err := Identity(testJoin(2), "beta", seal.RoleAgent, "", "")
	require.NoError(t, err)
	_, err = tls.Dial("tcp", inner.Addr().String(), stranger.ClientConfig(seal.Peer{}))
	require.ErrorContains(t, err, "not of mesh home")
	require.Eventually(t, func() bool { return l.LastRefused() != nil }, 10*time.Second, 5*time.Millisecond)

	fs := refusals(l, "alpha", time.Now())
	require.Len(t, fs, 1)
	require.Equal(t, api.SeverityWarning, fs[0].Severity)
	require.Contains(t, fs[0].Problem, "from 127.0.0.1")
	require.Contains(t, fs[0].Fix, "join string")
	require.Contains(t, fs[0].Detail, "1 handshake(s) refused")
	require.Empty(t, refusals(l, "alpha", time.Now().Add(refusalRecent+time.Minute)), "an old refusal is history")
}
