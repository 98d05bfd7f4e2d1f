package agent

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/hailozoo"
)

// An engine that listens beyond loopback is reachable by anyone on the LAN, past every token,
// namespace and budget the mesh enforces: hailo-ollama binds 0.0.0.0:8000 by default in every
// release, and an Ollama or llama-server started by hand often binds 0.0.0.0 too. The doctor
// names each such listener with the fix for that engine and release.
//
// It looks at the listening sockets themselves, in /proc/net/tcp and tcp6 (what `ss -ltn`
// reads), so finding one costs no traffic: a socket bound to 0.0.0.0, ::, or an address other
// than loopback answers from the LAN. The agent sees only its own network namespace, which is
// where it reaches its engines on loopback; an engine in a container with its own namespace
// is not seen (nothing is claimed about it).

// procNet is where the listening sockets are read; tests point it at fixtures.
var procNet = "/proc/net"

// listener is a TCP socket in LISTEN state.
type listener struct {
	ip   net.IP
	port int
}

// listeners reads the LISTEN sockets of /proc/net/tcp and tcp6 under dir. A file that cannot be
// read (not Linux, a locked-down /proc) yields nothing and its error.
func listeners(dir string) ([]listener, error) {
	var out []listener
	for _, name := range []string{"tcp", "tcp6"} {
		ls, err := readProcNet(filepath.Join(dir, name))
		if err != nil {
			return out, err
		}
		out = append(out, ls...)
	}
	return out, nil
}

const tcpListen = "0A" // the state column of a listening socket

func readProcNet(path string) ([]listener, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []listener
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || fields[3] != tcpListen {
			continue
		}
		ip, port, ok := parseProcAddr(fields[1])
		if ok {
			out = append(out, listener{ip, port})
		}
	}
	return out, sc.Err()
}

// parseProcAddr reads "0100007F:1F40": the address as 32-bit words in the kernel's byte order
// (little-endian on every platform the agent runs on), then the port in hex.
func parseProcAddr(s string) (net.IP, int, bool) {
	hexIP, hexPort, ok := strings.Cut(s, ":")
	if !ok || (len(hexIP) != 8 && len(hexIP) != 32) {
		return nil, 0, false
	}
	raw, err := hex.DecodeString(hexIP)
	if err != nil {
		return nil, 0, false
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return nil, 0, false
	}
	ip := make(net.IP, len(raw))
	for w := 0; w < len(raw); w += 4 {
		ip[w], ip[w+1], ip[w+2], ip[w+3] = raw[w+3], raw[w+2], raw[w+1], raw[w]
	}
	return ip, int(port), true
}

// exposed is the first listener on port bound beyond loopback, if any.
func exposed(ls []listener, port int) (listener, bool) {
	for _, l := range ls {
		if l.port == port && !l.ip.IsLoopback() {
			return l, true
		}
	}
	return listener{}, false
}

// engineEndpoint is one engine address the agent talks to, with what the fix depends on.
type engineEndpoint struct {
	runtime api.Runtime
	version string
	addr    string // the URL the agent uses
}

// endpoints lists the engines the agent talks to: the daemons it detected, and the
// llama-server instances its ready placements run (whose Address is a binary, not a URL).
func endpoints(h api.Host, ps []api.Placement) []engineEndpoint {
	var out []engineEndpoint
	for _, e := range h.Engines {
		if e.Present && strings.Contains(e.Address, "://") {
			out = append(out, engineEndpoint{e.Runtime, e.Version, e.Address})
		}
	}
	for _, p := range ps {
		if p.Runtime == api.RuntimeLlamaServer && p.Engine != "" {
			out = append(out, engineEndpoint{p.Runtime, "", p.Engine})
		}
	}
	return slices.CompactFunc(out, func(a, b engineEndpoint) bool { return a.addr == b.addr })
}

// exposureFindings names every engine the agent talks to that listens beyond loopback.
func exposureFindings(h api.Host, ps []api.Placement) []api.Finding {
	eps := endpoints(h, ps)
	if len(eps) == 0 {
		return nil
	}
	ls, lsErr := listeners(procNet)
	var out []api.Finding
	for _, ep := range eps {
		u, err := url.Parse(ep.addr)
		if err != nil {
			continue
		}
		port, err := strconv.Atoi(u.Port())
		if err != nil {
			continue
		}
		where := ""
		if ip := net.ParseIP(u.Hostname()); ip != nil && !ip.IsLoopback() {
			// The agent itself reaches it beyond loopback: so can the LAN.
			where = u.Host
		} else if l, ok := exposed(ls, port); ok && lsErr == nil {
			where = net.JoinHostPort(l.ip.String(), strconv.Itoa(port))
			if l.ip.IsUnspecified() {
				where += " (every interface)"
			}
		}
		if where == "" {
			continue
		}
		out = append(out, api.Finding{
			Severity: api.SeverityError,
			Problem: fmt.Sprintf("engine %s on %s listens on %s, beyond loopback: anyone on the network can use it without a token, past the mesh's namespaces and budgets",
				ep.runtime, h.Name, where),
			Fix: exposureFix(ep, port),
		})
	}
	return out
}

// exposureFix is the setting that binds the engine to loopback, for its runtime and release.
func exposureFix(ep engineEndpoint, port int) string {
	loop := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	switch ep.runtime {
	case api.RuntimeHailoOllama:
		env := fmt.Sprintf("set OLLAMA_HOST=%s in hailo-ollama's environment (sudo systemctl edit hailo-ollama: [Service] Environment=OLLAMA_HOST=%s)", loop, loop)
		json := fmt.Sprintf(`set "server": {"host": "127.0.0.1", "port": %d} in hailo-ollama.json (~/.config/hailo-ollama/ of the user it runs as)`, port)
		if hailozoo.ReleaseOf(ep.version).BindsByEnv() {
			return fmt.Sprintf("hailo-ollama %s binds by OLLAMA_HOST, not by its JSON: %s, then restart it", ep.version, env)
		}
		return fmt.Sprintf("hailo-ollama before 5.3 binds by its JSON: %s; 5.3 and later read OLLAMA_HOST instead, and this daemon reports version %q, which does not tell them apart, so also %s; then restart it",
			json, ep.version, env)
	case api.RuntimeOllama:
		return fmt.Sprintf("set OLLAMA_HOST=%s in Ollama's environment (sudo systemctl edit ollama: [Service] Environment=OLLAMA_HOST=%s), then restart it", loop, loop)
	default:
		return fmt.Sprintf("the agent starts llama-server on loopback; a llama-server started by hand on this port is exposed: stop it, or start it with --host 127.0.0.1 --port %d", port)
	}
}
