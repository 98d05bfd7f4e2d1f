package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/hwprobe"
	"github.com/llmkube/mesh/sim/simtest"
)

// logged counts the lines of a JSON log with message msg.
func logged(log *simtest.Buffer, msg string) int {
	return strings.Count(log.String(), `"msg":"`+msg+`"`)
}

// A periodic detection round's code pages go back as soon as the round is over, not after
// --release-code-after: here that is longer than the time between rounds, which kept every
// round's pages until the next one before.
func TestReleaseRightAfterADetectionRound(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("execpages releases pages on Linux only")
	}
	dir := t.TempDir()
	sd, err := state.Open(filepath.Join(dir, "state"))
	require.NoError(t, err)
	t.Cleanup(func() { sd.Close() })
	a, err := agent.New(agent.Config{State: sd, ModelsDir: filepath.Join(dir, "models"), AllowTempStore: true,
		Host:   hwprobe.Info{Memory: hwprobe.MemInfo{Total: 8 << 30, Available: 6 << 30}},
		Sizer:  &sizing.Sizer{},
		Budget: 4 << 30, DetectInterval: 40 * time.Millisecond})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ran, released := make(chan struct{}), make(chan struct{})
	go func() { a.Run(ctx); close(ran) }()
	var log simtest.Buffer
	go func() {
		releaseWhenSettled(ctx, a, 400*time.Millisecond, slog.New(slog.NewJSONHandler(&log, &slog.HandlerOptions{Level: slog.LevelDebug})))
		close(released)
	}()
	t.Cleanup(func() { cancel(); <-ran; <-released })

	require.Eventually(t, func() bool { return logged(&log, "start-up over") == 1 }, 10*time.Second, 5*time.Millisecond)
	// Rounds come every 40 ms, each of which put the release off by 400 ms before.
	require.Eventually(t, func() bool { return logged(&log, "code pages released") >= collectEvery+1 }, 10*time.Second, 5*time.Millisecond)
	require.Zero(t, logged(&log, "releasing code pages"), "a release failed")

	// The heap's free pages go back at every collectEvery-th round's release, not between.
	var returned []bool
	for _, line := range strings.Split(log.String(), "\n") {
		var l struct {
			Msg          string
			HeapReturned bool `json:"heap_returned"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.Msg == "code pages released" {
			returned = append(returned, l.HeapReturned)
		}
	}
	want := make([]bool, collectEvery+1)
	want[collectEvery-1] = true
	require.Equal(t, want, returned[:collectEvery+1])
}
