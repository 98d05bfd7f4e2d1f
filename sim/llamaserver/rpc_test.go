package llamaserver

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/sim/simtest"
)

// freeAddr is a loopback address nothing listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// worker runs a simulated ggml-rpc-server on addr until the returned stop; its exit status
// comes on the channel.
func worker(t *testing.T, addr string, out *simtest.Buffer) (stop func(), code <-chan int) {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan int, 1)
	go func() { ch <- RPCMain(ctx, []string{"-H", host, "-p", port, "-c"}, out, out) }()
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 10*time.Second, 10*time.Millisecond)
	t.Cleanup(cancel)
	return cancel, ch
}

// The simulated main greets each --rpc worker before it loads, serves while they are there, and
// aborts with status 1 when one goes, as llama-server does on a dead worker.
func TestRPCWorkerLossAbortsTheMain(t *testing.T) {
	var wout simtest.Buffer
	w1, w2 := freeAddr(t), freeAddr(t)
	stop1, code1 := worker(t, w1, &wout)
	worker(t, w2, &wout)
	assert.Contains(t, wout.String(), "Starting RPC server v"+RPCProtocol)

	port := freeAddr(t)
	_, p, _ := net.SplitHostPort(port)
	var out simtest.Buffer
	done := make(chan int, 1)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	args := []string{"-m", modelFile(t, 1<<20), "--port", p, "--rpc", w1 + "," + w2, "-ngl", "99", "--tensor-split", "0.5,0.5"}
	go func() { done <- Main(ctx, args, func(string) string { return "" }, &out, &out) }()
	require.Eventually(t, func() bool {
		r, err := http.Get("http://" + port + "/health")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	}, 10*time.Second, 10*time.Millisecond, out.String())
	assert.Contains(t, out.String(), "RPC0["+w1+"] attached")
	assert.Contains(t, out.String(), "RPC1["+w2+"] attached")

	stop1()
	assert.Equal(t, 0, <-code1, "a worker stopped by its signal exits 0")
	select {
	case code := <-done:
		assert.Equal(t, 1, code)
	case <-time.After(10 * time.Second):
		t.Fatal("the main did not abort when its worker went")
	}
	assert.Contains(t, out.String(), "the connection to RPC server "+w1+" was lost: aborting")
}

// A worker that cannot be reached fails the load, in llama-server's words; one that is not a
// simulated worker too.
func TestRPCUnreachableWorkerFailsTheLoad(t *testing.T) {
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	for _, ep := range []string{freeAddr(t), silent.Addr().String()} {
		var out simtest.Buffer
		code := Main(context.Background(), []string{"-m", modelFile(t, 1<<20), "--port", "0", "--rpc", ep}, func(string) string { return "" }, &out, &out)
		assert.Equal(t, 1, code)
		assert.Contains(t, out.String(), "Failed to connect to "+ep)
		assert.Contains(t, out.String(), "exiting due to model loading error")
	}
	_, err = ParseArgs([]string{"-m", "x.gguf", "--rpc", "nohost"}, DefaultConfig())
	assert.ErrorContains(t, err, "invalid RPC endpoint: nohost")
}

// The agent's version probe starts the worker on a port it holds: the banner comes first, then
// the exit with status 1.
func TestRPCWorkerBannerThenBindFailure(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { held.Close() })
	var out simtest.Buffer
	port := strconv.Itoa(held.Addr().(*net.TCPAddr).Port)
	assert.Equal(t, 1, RPCMain(context.Background(), []string{"-H", "127.0.0.1", "-p", port}, &out, &out))
	assert.Contains(t, out.String(), "Starting RPC server v5.0.0")
	assert.Contains(t, out.String(), "Failed to create server socket")
	assert.Equal(t, 1, RPCMain(context.Background(), []string{"--nope"}, &out, &out))
}
