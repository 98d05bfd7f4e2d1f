package llamaserver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The RPC link of the simulators: a stand-in for llama.cpp's RPC backend that carries no
// tensors. The simulated llama-server dials each --rpc endpoint, greets it, and holds the
// connection as a liveness link: when one closes, it aborts, as the real main does when a worker
// dies. The simulated worker (RPCMain, started under the name ggml-rpc-server) answers one
// client at a time, as the real one does. The real binaries stay what the tests trust; this is
// what the demo runs.

// RPCProtocol is the protocol version the simulated worker prints, as ggml-rpc-server v5.0.0
// does; agents compare it across a split's members.
const RPCProtocol = "5.0.0"

// rpcHello and rpcWelcome are the simulators' greeting: a main that reached something other
// than a simulated worker fails to load, as the real one does.
const (
	rpcHello   = "llmkube-sim-rpc hello\n"
	rpcWelcome = "llmkube-sim-rpc v" + RPCProtocol + "\n"
)

// rpcDialTimeout bounds the greeting of one worker.
const rpcDialTimeout = 10 * time.Second

// RPCUsage is what the simulated worker prints for -h.
const RPCUsage = `usage: ggml-rpc-server [-H host] [-p port] [-c] [-t threads]

A simulator of llama.cpp's ggml-rpc-server for the demo: it serves one client at a time and
holds its connection as a liveness link; it carries no tensors.
`

// RPCMain is the simulated ggml-rpc-server as a program: it prints the real worker's banner,
// listens on -H:-p (127.0.0.1:50052 by default) and serves until ctx ends; 1 on a bad command
// line or a port it cannot bind (the agent's version probe relies on both: the banner first,
// then the exit).
func RPCMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	host, port := "127.0.0.1", "50052"
	for i := 0; i < len(args); i++ {
		switch a := args[i]; a {
		case "-h", "--help":
			fmt.Fprint(stdout, RPCUsage)
			return 0
		case "-c", "--cache":
		case "-H", "--host", "-p", "--port", "-t", "--threads", "-d", "--device", "-m", "--mem":
			if i+1 >= len(args) {
				fmt.Fprintf(stderr, "error: %s needs a value\n", a)
				return 1
			}
			i++
			switch a {
			case "-H", "--host":
				host = args[i]
			case "-p", "--port":
				if n, err := strconv.Atoi(args[i]); err != nil || n < 0 || n > 65535 {
					fmt.Fprintf(stderr, "error: invalid port %q\n", args[i])
					return 1
				}
				port = args[i]
			}
		default:
			fmt.Fprintf(stderr, "error: unknown argument: %s\n", a)
			fmt.Fprint(stderr, RPCUsage)
			return 1
		}
	}
	addr := net.JoinHostPort(host, port)
	fmt.Fprintf(stdout, "Starting RPC server v%s\n  endpoint       : %s\n  local cache    : on\nDevices:\n  CPU: simulated CPU (no tensors)\n", RPCProtocol, addr)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintf(stderr, "Failed to create server socket: %v\n", err)
		return 1
	}
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			return 0 // ctx ended: the listener is closed
		}
		fmt.Fprintf(stdout, "Accepted client connection\n")
		serveRPCClient(ctx, c)
		fmt.Fprintf(stdout, "Client connection closed\n")
	}
}

// serveRPCClient greets one client and holds its connection until either side ends it; the
// next client waits meanwhile, as with the real worker.
func serveRPCClient(ctx context.Context, c net.Conn) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil || line != rpcHello {
		return // a probe that connects and closes, or not a simulated main
	}
	if _, err := io.WriteString(c, rpcWelcome); err != nil {
		return
	}
	_, _ = io.Copy(io.Discard, r)
}

// rpcLinks are the simulated main's links to its workers.
type rpcLinks struct {
	conns []net.Conn
	lost  chan string // the endpoint of the first link that closed
	once  sync.Once
}

// dialRPC greets every endpoint; an error names the one that could not be reached.
func dialRPC(ctx context.Context, endpoints []string) (*rpcLinks, error) {
	l := &rpcLinks{lost: make(chan string, 1)}
	for _, ep := range endpoints {
		c, err := greet(ctx, ep)
		if err != nil {
			l.close()
			return nil, fmt.Errorf("%s: %w", ep, err)
		}
		l.conns = append(l.conns, c)
	}
	for i, c := range l.conns {
		go func() {
			_, _ = io.Copy(io.Discard, c)
			l.once.Do(func() { l.lost <- endpoints[i] })
		}()
	}
	return l, nil
}

func greet(ctx context.Context, ep string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, rpcDialTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ep)
	if err != nil {
		return nil, err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	line, err := "", error(nil)
	if _, err = io.WriteString(c, rpcHello); err == nil {
		line, err = bufio.NewReader(c).ReadString('\n')
	}
	if err == nil && line != rpcWelcome {
		err = fmt.Errorf("not an RPC server of protocol v%s: %q", RPCProtocol, strings.TrimSpace(line))
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

func (l *rpcLinks) close() {
	for _, c := range l.conns {
		c.Close()
	}
}

// parseRPC reads --rpc: host:port endpoints, comma-separated.
func parseRPC(v string) ([]string, error) {
	var out []string
	for ep := range strings.SplitSeq(v, ",") {
		if _, _, err := net.SplitHostPort(ep); err != nil {
			return nil, errors.New("invalid RPC endpoint: " + ep)
		}
		out = append(out, ep)
	}
	return out, nil
}
