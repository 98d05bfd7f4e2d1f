package llamaserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// ExitError is how a llama-server process ended when nobody asked it to.
type ExitError struct {
	Code   int    // exit status; -1 when a signal killed it
	Signal string // the signal's name when one killed it
	Reason string // the engine's own words for it: the first error line of its log's end
	Tail   string // the last lines of its log
}

func (e *ExitError) Error() string {
	var b strings.Builder
	if e.Signal != "" {
		fmt.Fprintf(&b, "llama-server was killed by signal %s", e.Signal)
	} else {
		fmt.Fprintf(&b, "llama-server exited with status %d", e.Code)
	}
	if e.Reason != "" {
		b.WriteString(": " + e.Reason)
	}
	if e.Tail != "" {
		b.WriteString("; last log lines:\n")
		b.WriteString(e.Tail)
	}
	return b.String()
}

// tailLinesInErrors is how many log lines an error carries.
const tailLinesInErrors = 8

// reasonLines is how far back from its end a log is searched for the engine's own reason: past
// the cascade of follow-up errors llama-server prints after the first.
const reasonLines = 40

// errorLine is a line llama-server logs as an error: "0.00.012.317 E gguf_init_from_reader: …"
// (its level after the timestamp), or "error: …" / "error while handling argument …" (its
// command line parser, before logging starts).
var errorLine = regexp.MustCompile(`^(?:[0-9.]+ E +|error)`)

// exitReason is the first error line in a log's tail, its timestamp and level dropped, bounded
// and printable; "" when the tail has none.
func exitReason(tail string) string {
	for line := range strings.SplitSeq(tail, "\n") {
		line = strings.TrimSpace(line)
		if loc := errorLine.FindStringIndex(line); loc != nil {
			if !strings.HasPrefix(line, "error") {
				line = line[loc[1]:]
			}
			line = strings.Map(func(r rune) rune {
				if unicode.IsControl(r) {
					return -1
				}
				return r
			}, line)
			if len(line) > 300 {
				line = strings.ToValidUTF8(line[:300], "") + "…"
			}
			return line
		}
	}
	return ""
}

// Instance is one llama-server process serving one placement.
type Instance struct {
	id       string
	alias    string
	port     int
	endpoint string
	logPath  string
	cmd      *exec.Cmd
	log      *logFile
	http     *http.Client // chats and embeddings: no proxy, no overall timeout (answers stream)

	done     chan struct{}
	stopping atomic.Bool // set before a requested stop: its exit is not a failure
	err      error       // set before done closes
}

func (i *Instance) Endpoint() string      { return i.endpoint }
func (i *Instance) Done() <-chan struct{} { return i.done }
func (i *Instance) LogPath() string       { return i.logPath }

// Err is nil for a stop the driver asked for, and otherwise an *engines.Error (EngineError)
// wrapping an *ExitError with the exit status and the log's last lines.
func (i *Instance) Err() error {
	select {
	case <-i.done:
		return i.err
	default:
		return nil
	}
}

// Pid is the process id.
func (i *Instance) Pid() int { return i.cmd.Process.Pid }

// Port is the loopback port it listens on.
func (i *Instance) Port() int { return i.port }

// Alias is the name it serves the model under.
func (i *Instance) Alias() string { return i.alias }

func (i *Instance) exited() bool {
	select {
	case <-i.done:
		return true
	default:
		return false
	}
}

// launch starts llama-server with args in its own process group, output to the log file, and
// watches for its exit.
func launch(bin string, args, env []string, id, alias string, port int, logPath string, maxLog int64, stopGrace time.Duration) (*Instance, error) {
	lf, err := openLog(logPath, maxLog)
	if err != nil {
		return nil, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("engine log: %w", err)}
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout = lf
	cmd.Stderr = lf
	cmd.SysProcAttr = sysProcAttr()
	// Output is copied through a pipe; a grandchild holding it open must not keep Wait waiting.
	cmd.WaitDelay = stopGrace
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("starting %s: %w", bin, err)}
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	inst := &Instance{
		id: id, alias: alias, port: port, logPath: logPath, cmd: cmd, log: lf,
		endpoint: "http://" + addr,
		http:     &http.Client{Transport: engineTransport()},
		done:     make(chan struct{}),
	}
	go inst.wait()
	return inst, nil
}

// wait reaps the process (no zombies) and records why it ended.
func (i *Instance) wait() {
	err := i.cmd.Wait()
	i.log.Close()
	i.http.CloseIdleConnections()
	if !i.stopping.Load() {
		ee := &ExitError{Code: -1, Tail: tailLines(i.logPath, tailLinesInErrors), Reason: exitReason(tailLines(i.logPath, reasonLines))}
		var xe *exec.ExitError
		if errors.As(err, &xe) {
			ee.Code = xe.ExitCode()
			if ws, ok := xe.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				ee.Signal = ws.Signal().String()
			}
		} else if err == nil {
			ee.Code = 0
		}
		i.err = &engines.Error{Code: api.CodeEngineError, Err: ee}
	}
	close(i.done)
}

// stop sends SIGTERM to the process group, SIGKILL after grace (or at once when ctx ends), and
// waits for the exit.
func (i *Instance) stop(ctx context.Context, grace time.Duration) {
	i.stopping.Store(true)
	if i.exited() {
		return
	}
	signalGroup(i.cmd.Process.Pid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-i.done:
		return
	case <-t.C:
	case <-ctx.Done():
	}
	signalGroup(i.cmd.Process.Pid, syscall.SIGKILL)
	<-i.done
}

// signalGroup signals the process group led by pid (llama-server and anything it started).
func signalGroup(pid int, sig syscall.Signal) {
	if err := syscall.Kill(-pid, sig); err != nil {
		syscall.Kill(pid, sig) // not a group leader after all
	}
}

// freePort asks the kernel for a free loopback port. The port is free when asked, not
// necessarily when llama-server binds it a moment later: the caller retries when the process
// fails to bind (see errBindCollision).
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// errBindCollision marks a start that failed because another process took the port.
var errBindCollision = errors.New("port taken")

// probeClient checks health: short timeouts, no proxy, no keep-alive (a poll every few hundred
// milliseconds gains nothing from it, and an idle connection per instance would pile up).
var probeClient = &http.Client{
	Timeout:   5 * time.Second,
	Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true},
}

// waitReady polls /health until it answers 200, the process exits, the start stalls or ctx
// ends, then checks that the server on the port is this one (serving this alias), so a port
// taken by another server is not mistaken for our engine. The start has stalled when, for
// stall, it has shown no progress: no bytes of the model read from the disk (mapped or read,
// /proc/<pid>/io's read_bytes; Linux only) and none of sent (a split's weights to its members)
// moved. The bound is on a stall, not the start: a large model read from an SD card, or a
// split sending its members tens of GB, takes as long as it takes.
func (i *Instance) waitReady(ctx context.Context, stall time.Duration, sent func() int64) error {
	progress := func() int64 {
		n := readBytes(i.Pid())
		if sent != nil {
			n += sent()
		}
		return n
	}
	last, since := progress(), time.Now()
	interval := 20 * time.Millisecond
	for {
		status, err := i.get(ctx, "/health", nil)
		if err == nil && status == http.StatusOK {
			return i.checkIdentity(ctx)
		}
		if n := progress(); n != last {
			last, since = n, time.Now()
		} else if time.Since(since) >= stall {
			what := "read nothing of the model from the disk"
			if sent != nil {
				what += " and sent its split's members nothing"
			}
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf(
				"llama-server did not become healthy, and for %v it %s; last log lines:\n%s",
				stall, what, tailLines(i.logPath, tailLinesInErrors))}
		}
		t := time.NewTimer(min(interval, max(stall-time.Since(since), time.Millisecond)))
		select {
		case <-i.done:
			t.Stop()
			var ee *ExitError
			if !errors.As(i.err, &ee) {
				return &engines.Error{Code: api.CodeEngineError, Err: errors.New("llama-server was stopped while starting")}
			}
			if bindFailure(ee.Tail) {
				return errBindCollision
			}
			return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("while starting, %w", ee)}
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		interval = min(interval*3/2, 500*time.Millisecond)
	}
}

// bindFailure recognises llama-server's words when its port is taken.
func bindFailure(tail string) bool {
	t := strings.ToLower(tail)
	return strings.Contains(t, "couldn't bind") || strings.Contains(t, "address already in use")
}

func (i *Instance) checkIdentity(ctx context.Context) error {
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	status, err := i.get(ctx, "/v1/models", &models)
	if err != nil || status != http.StatusOK {
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server is healthy but /v1/models failed (status %d): %v", status, err)}
	}
	var served []string
	for _, m := range models.Data {
		if m.ID == i.alias {
			return nil
		}
		served = append(served, m.ID)
	}
	if i.listening() {
		// Our own process serves the port, under other names: a collision it is not.
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf(
			"llama-server serves the model as %q, not as %q; last log lines:\n%s", served, i.alias, tailLines(i.logPath, tailLinesInErrors))}
	}
	// Another server answered on the port (ours could not bind it, or has yet to fail to).
	return errBindCollision
}

// listening reports whether the process's own log says it listens on its port ("listening on
// http://127.0.0.1:<port>", printed once it has bound it).
func (i *Instance) listening() bool {
	log, mark := tailLines(i.logPath, 64), "listening on "+i.endpoint
	for {
		at := strings.Index(log, mark)
		if at < 0 {
			return false
		}
		log = log[at+len(mark):]
		if log == "" || log[0] < '0' || log[0] > '9' { // ":8080" is not ":80"
			return true
		}
	}
}

// get fetches path; out, when not nil, receives the JSON answer of a 200.
func (i *Instance) get(ctx context.Context, path string, out any) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, i.endpoint+path, nil)
	if err != nil {
		return 0, err
	}
	resp, err := probeClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode == http.StatusOK && out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
			return resp.StatusCode, err
		}
	}
	return resp.StatusCode, nil
}

// Resident is what the process holds in memory now (engines.Measurer).
func (i *Instance) Resident() (engines.Resident, error) {
	if i.exited() {
		return engines.Resident{}, errors.New("llama-server has exited")
	}
	return resident(i.cmd.Process.Pid)
}
