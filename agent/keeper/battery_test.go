package keeper_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/localmesh"
	"github.com/llmkube/mesh/assets"
)

// setPower writes a laptop's power supplies under an hwprobe root, as sysfs shows them:
// unplugged (its battery discharging, the charger offline) or plugged in (charging).
func setPower(t *testing.T, root string, onBattery bool) {
	t.Helper()
	status, online := "Charging", "1"
	if onBattery {
		status, online = "Discharging", "0"
	}
	for file, v := range map[string]string{"BAT0/type": "Battery", "BAT0/status": status, "AC/type": "Mains", "AC/online": online} {
		p := filepath.Join(root, "sys", "class", "power_supply", filepath.FromSlash(file))
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		// Renamed into place, as sysfs never shows a half-written value.
		require.NoError(t, os.WriteFile(p+".new", []byte(v+"\n"), 0o644))
		require.NoError(t, os.Rename(p+".new", p))
	}
}

// onBatteryAsSeen is what host from's view says of each host's power source.
func onBatteryAsSeen(ctx context.Context, m *localmesh.Mesh, from string) map[string]bool {
	v, err := m.Client(from).Mesh(ctx)
	if err != nil {
		return nil
	}
	out := map[string]bool{}
	for _, mb := range v.Members {
		if mb.Host != nil {
			out[mb.Name] = mb.Host.OnBattery
		}
	}
	return out
}

// readyOn lists the hosts where model is ready, as host from sees them.
func readyOn(ctx context.Context, m *localmesh.Mesh, from, model string) []string {
	v, err := m.Client(from).Mesh(ctx)
	if err != nil {
		return nil
	}
	var out []string
	for _, mb := range v.Members {
		for _, p := range mb.Placements {
			if p.Model == model && p.State == api.StateReady && mb.Liveness == api.Alive {
				out = append(out, mb.Name)
			}
		}
	}
	return out
}

// Two laptops, each agent reading its own power supplies: an intent kept off battery lands on
// the one plugged in, though the other ranks first by name; placing it by hand on the one on
// battery is refused. Once they swap (one unplugged, the other plugged in), the agents see it
// at their next probe and gossip it; the running replica stays, and a new intent goes to the
// host now plugged in.
func TestAnIntentKeptOffBatteryLandsOnAHostPluggedIn(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	roots := map[string]string{}
	var hosts []localmesh.HostSpec
	for _, n := range []string{"a", "b"} {
		root, err := assets.ExtractDemoHost("gpu-server", filepath.Join(t.TempDir(), n))
		require.NoError(t, err)
		setPower(t, root, n == "a")
		roots[n] = root
		hosts = append(hosts, localmesh.HostSpec{Name: n, Root: root, OS: "linux", Arch: "amd64", Runtimes: []api.Runtime{api.RuntimeOllama}})
	}
	m, err := localmesh.Start(ctx, localmesh.Options{Dir: t.TempDir(), Hosts: hosts, Fast: true, DetectInterval: 100 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(func() { _ = m.Close() })
	require.Eventually(t, func() bool {
		return assert.ObjectsAreEqual(map[string]bool{"a": true, "b": false}, onBatteryAsSeen(ctx, m, "b"))
	}, 30*time.Second, 50*time.Millisecond, "b sees a on battery, by gossip")

	req := api.PlacementRequest{Source: "ollama://" + model, NotOnBattery: true}
	_, err = m.Client("a").Place(ctx, req)
	var ae *api.Error
	require.True(t, errors.As(err, &ae), "%v", err)
	assert.Equal(t, api.CodeOnBattery, ae.Code)
	assert.Contains(t, ae.Message, "a runs on battery")

	in, err := m.Client("a").Intend(ctx, req)
	require.NoError(t, err, "accepted on a host on battery: another may take it")
	assert.True(t, in.NotOnBattery)
	require.Eventually(t, func() bool {
		return slices.Equal([]string{"b"}, readyOn(ctx, m, "a", model))
	}, 30*time.Second, 50*time.Millisecond, "placed on b, the host plugged in")

	setPower(t, roots["a"], false)
	setPower(t, roots["b"], true)
	require.Eventually(t, func() bool {
		return assert.ObjectsAreEqual(map[string]bool{"a": false, "b": true}, onBatteryAsSeen(ctx, m, "a"))
	}, 30*time.Second, 50*time.Millisecond, "the swap is seen at the next probe and gossiped")

	const other = "llama3.2:1b"
	_, err = m.Client("b").Intend(ctx, api.PlacementRequest{Source: "ollama://" + other, NotOnBattery: true})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return slices.Equal([]string{"a"}, readyOn(ctx, m, "b", other))
	}, 30*time.Second, 50*time.Millisecond, "the new intent goes to a, plugged in now")
	assert.Equal(t, []string{"b"}, readyOn(ctx, m, "a", model), "the replica on b, gone on battery, keeps running")
}
