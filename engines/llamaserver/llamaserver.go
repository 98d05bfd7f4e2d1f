// Package llamaserver drives llama.cpp's llama-server: one process per placement on a free
// loopback port, started with the model, context and alias, ready when /health answers 200,
// stopped with SIGTERM then SIGKILL, its output captured to a log file. GGUF files come from
// local paths or are downloaded (engines/download) into the models folder.
package llamaserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/sizing"
)

// BinaryName is the program looked up on PATH when Config.Binary is empty.
const BinaryName = "llama-server"

// Defaults for Config's zero values.
const (
	// DefaultHealthTimeout is generous: a large model on a slow disk takes minutes to load,
	// and this bounds only a start that shows no progress.
	DefaultHealthTimeout = 10 * time.Minute
	DefaultStopGrace     = 10 * time.Second
)

// startAttempts is how often Load tries a new port when another process took the one chosen.
const startAttempts = 3

// versionTimeout bounds `llama-server --version` in Detect.
const versionTimeout = 5 * time.Second

// InstallHint says how to get llama-server.
const InstallHint = "install llama.cpp (`brew install llama.cpp` on macOS or Linux, or build it from https://github.com/ggml-org/llama.cpp), or give the path to llama-server (--llama-server)"

// Config is how the driver finds, starts and feeds llama-server.
type Config struct {
	// Binary is llama-server's path; "" looks up BinaryName on PATH (at each Detect and Load,
	// so installing it later needs no restart).
	Binary string
	// ModelsDir is where https:// and hf:// sources are downloaded.
	ModelsDir string
	// HFBase is the Hugging Face base URL for hf:// sources; "" is source.DefaultHFBase.
	HFBase string
	// HealthTimeout bounds a start that stalls: llama-server fails to start when /health has
	// not answered 200 and, for this long, it read nothing of its model from the disk nor sent
	// a split's members anything (a 70B split over Wi-Fi sends its members their weights for
	// longer than any fixed bound). 0 is DefaultHealthTimeout.
	HealthTimeout time.Duration
	// StopGrace is how long a stop waits after SIGTERM before SIGKILL; 0 is DefaultStopGrace.
	StopGrace time.Duration
	// LogDir holds each placement's engine log, <LogDir>/<placement id>.log. Required.
	LogDir string
	// MaxLogBytes rotates a log that grows past it; 0 is DefaultMaxLog.
	MaxLogBytes int64
	// ExtraArgs is the allowlist of engine arguments a placement may add; nil is DefaultArgs.
	ExtraArgs []Arg
	// Download guards and configures GGUF downloads.
	Download download.Options
	// Env is added to the environment each llama-server gets ("CUDA_VISIBLE_DEVICES=0"): the
	// part of the agent's own that engines may see (engineEnv). LLMKUBE_* entries are dropped.
	Env []string
	// GGUFDirs are folders whose GGUF files Detect offers as models this host can run without
	// a pull (the console suggests them as file:// sources); nil offers ModelsDir's.
	GGUFDirs []string
}

// maxOffered bounds the GGUF files Detect lists: they travel in the host's state document.
const maxOffered = 32

// engineTransport is the connections to one engine. A chat's closes after its answer (see
// Chat); the others — embeddings, which do not stream — are kept open for as many requests as a
// busy gateway sends one engine at once, and close after 4 s unused, before llama-server's own
// 5 s keep-alive would close one under a request.
func engineTransport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     4 * time.Second,
	}
}

// Driver runs llama-server processes. It is safe for concurrent use.
type Driver struct {
	cfg Config
	log *slog.Logger

	// freePort picks a port; tests replace it to hand out a port that is already taken.
	freePort func() (int, error)

	mu        sync.Mutex
	instances map[string]*Instance // by placement id
	starting  map[string]*start
	version   knownVersion
}

var _ engines.Driver = (*Driver)(nil)

// New returns a driver. It fails on a configuration that cannot work (no log folder); a missing
// llama-server is not an error here, since it matters only when this runtime is used.
func New(cfg Config, log *slog.Logger) (*Driver, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := logFolder(cfg.LogDir, "llama-server driver", "Config.LogDir"); err != nil {
		return nil, err
	}
	if cfg.HealthTimeout <= 0 {
		cfg.HealthTimeout = DefaultHealthTimeout
	}
	if cfg.StopGrace <= 0 {
		cfg.StopGrace = DefaultStopGrace
	}
	if cfg.MaxLogBytes <= 0 {
		cfg.MaxLogBytes = DefaultMaxLog
	}
	if cfg.ExtraArgs == nil {
		cfg.ExtraArgs = DefaultArgs
	}
	return &Driver{
		cfg:       cfg,
		log:       log.With("runtime", string(api.RuntimeLlamaServer)),
		freePort:  freePort,
		instances: map[string]*Instance{},
		starting:  map[string]*start{},
	}, nil
}

// Runtime is api.RuntimeLlamaServer.
func (d *Driver) Runtime() api.Runtime { return api.RuntimeLlamaServer }

// binary finds llama-server.
func (d *Driver) binary() (string, error) {
	if d.cfg.Binary != "" {
		fi, err := os.Stat(d.cfg.Binary)
		switch {
		case err != nil:
			return "", fmt.Errorf("llama-server not found at %s: %w; %s", d.cfg.Binary, err, InstallHint)
		case fi.IsDir() || fi.Mode().Perm()&0o111 == 0:
			return "", fmt.Errorf("%s is not an executable file; %s", d.cfg.Binary, InstallHint)
		}
		return d.cfg.Binary, nil
	}
	p, err := exec.LookPath(BinaryName)
	if err != nil {
		return "", fmt.Errorf("%s not found on PATH; %s", BinaryName, InstallHint)
	}
	return p, nil
}

var versionRE = regexp.MustCompile(`version:\s*(\S+(?: \([0-9a-zA-Z]+\))?)`)

// Detect reports whether llama-server is installed (Address is its path) and its version from
// `llama-server --version`, which must answer within a few seconds.
func (d *Driver) Detect(ctx context.Context) api.Engine {
	e := api.Engine{Runtime: api.RuntimeLlamaServer}
	bin, err := d.binary()
	if err != nil {
		e.Detail = err.Error()
		return e
	}
	e.Present, e.Address = true, bin
	key, keyErr := binaryKey(bin)
	d.mu.Lock()
	known := d.version
	d.mu.Unlock()
	if keyErr == nil && known.key == key && time.Since(known.at) < versionRecheck {
		e.Version, e.Healthy = known.version, true
		e.Models = d.localGGUF()
		return e
	}
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--version")
	cmd.Env = engineEnv(os.Environ(), d.cfg.Env)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %v", versionTimeout)
		}
		e.Detail = fmt.Sprintf("%s --version failed: %v: %s", bin, err, lastLine(string(out)))
		return e
	}
	if m := versionRE.FindStringSubmatch(string(out)); m != nil {
		e.Version = m[1]
	}
	if keyErr == nil {
		d.mu.Lock()
		d.version = knownVersion{key: key, version: e.Version, at: time.Now()}
		d.mu.Unlock()
	}
	e.Healthy = true
	e.Models = d.localGGUF()
	return e
}

// versionRecheck is how long a binary's answer to --version is trusted while the file stays
// the same: Detect runs every 30 s, and each --version is a process start (a real
// llama-server's also loads its GPU backends) that an idle agent need not pay.
const versionRecheck = 10 * time.Minute

// binKey tells one binary file from another: a reinstall or upgrade changes it.
type binKey struct {
	path  string
	size  int64
	mtime time.Time
}

// knownVersion is the last successful --version, of the binary key names.
type knownVersion struct {
	key     binKey
	version string
	at      time.Time
}

func binaryKey(bin string) (binKey, error) {
	fi, err := os.Stat(bin)
	if err != nil {
		return binKey{}, err
	}
	return binKey{path: bin, size: fi.Size(), mtime: fi.ModTime()}, nil
}

// localGGUF lists the GGUF files in the offered folders and one level below (the store keeps
// downloads in a folder per host), sorted, at most maxOffered.
func (d *Driver) localGGUF() []string {
	dirs := d.cfg.GGUFDirs
	if dirs == nil && d.cfg.ModelsDir != "" {
		dirs = []string{d.cfg.ModelsDir}
	}
	var out []string
	for _, dir := range dirs {
		for _, pattern := range []string{"*.gguf", filepath.Join("*", "*.gguf"), filepath.Join("*", "*", "*.gguf")} {
			matches, _ := filepath.Glob(filepath.Join(dir, pattern))
			for _, m := range matches {
				if abs, err := filepath.Abs(m); err == nil && !strings.HasSuffix(abs, download.PartialSuffix) {
					out = append(out, abs)
				}
			}
		}
	}
	sort.Strings(out)
	out = slices.Compact(out)
	return out[:min(len(out), maxOffered)]
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.TrimSpace(s[i+1:])
	}
	return s
}

// parse reads m's source for this runtime.
func parse(m engines.Model) (source.Source, error) {
	s, err := source.Parse(m.Source)
	if err == nil {
		err = s.CheckRuntime(api.RuntimeLlamaServer)
	}
	if err != nil {
		var ae *api.Error
		if errors.As(err, &ae) {
			return s, &engines.Error{Code: ae.Code, Err: errors.New(ae.Message)}
		}
		return s, err
	}
	return s, nil
}

// LocalPath is where m's GGUF file is (a file source) or is downloaded to (https and hf
// sources): <ModelsDir>/hf/<owner>/<repo>/<file>, <ModelsDir>/https/<host>/<hash>-<name>.
// Pull puts it there; the agent records it as the model's Path.
func (d *Driver) LocalPath(m engines.Model) (string, error) {
	s, err := parse(m)
	if err != nil {
		return "", err
	}
	if s.Kind == source.KindFile {
		return s.Path, nil
	}
	if d.cfg.ModelsDir == "" {
		return "", &engines.Error{Code: api.CodePullFailed, Err: errors.New("no models folder is configured for downloads")}
	}
	var rel string
	switch s.Kind {
	case source.KindHF:
		rel = filepath.Join("hf", s.Owner, s.Repo, filepath.FromSlash(s.File))
	case source.KindHTTPS:
		rel = filepath.Join("https", downloadName(s.URL))
	}
	p := filepath.Join(d.cfg.ModelsDir, rel)
	// The source parser refuses ".." and the like; this makes sure of it.
	if r, err := filepath.Rel(d.cfg.ModelsDir, p); err != nil || !filepath.IsLocal(r) {
		return "", &engines.Error{Code: api.CodeInvalidSource, Err: fmt.Errorf("source %s would be stored outside the models folder", m.Source)}
	}
	return p, nil
}

// Pull makes m's GGUF file available: a file source must exist and be readable; https and hf
// sources are downloaded into the models folder (resumable, guarded; see engines/download).
// A projector (m.MMProj) is made available the same way, after the model.
func (d *Driver) Pull(ctx context.Context, m engines.Model, progress func(engines.Progress)) error {
	if progress == nil {
		progress = func(engines.Progress) {}
	}
	if err := d.pullFile(ctx, m, progress); err != nil || m.MMProj == "" {
		return err
	}
	return d.pullFile(ctx, projector(m), func(p engines.Progress) {
		p.Status = "projector: " + p.Status
		progress(p)
	})
}

// pullFile makes m's own GGUF file available.
func (d *Driver) pullFile(ctx context.Context, m engines.Model, progress func(engines.Progress)) error {
	s, err := parse(m)
	if err != nil {
		return err
	}
	dest, err := d.LocalPath(m)
	if err != nil {
		return err
	}
	if s.Kind == source.KindFile {
		size, err := readable(dest)
		if err != nil {
			return &engines.Error{Code: api.CodePullFailed, Err: err}
		}
		progress(engines.Progress{Status: "success", Completed: size, Total: size})
		return nil
	}
	from := s.DownloadURL(d.cfg.HFBase)
	want := download.Want{SHA256: m.SHA256, Bytes: m.Bytes}
	if want.SHA256 == "" && s.Kind == source.KindHF && d.cfg.Download.Peers != nil {
		// Hugging Face names the file's content: peers holding it are asked first, and the
		// download is verified against it.
		if sum, err := download.LFSDigest(ctx, from, d.cfg.Download); err != nil {
			d.log.Info("the file's digest could not be read from Hugging Face; downloading from it", "url", from, "err", err)
		} else {
			want.SHA256 = sum
		}
	}
	d.log.Info("downloading", "placement", m.ID, "url", from, "to", dest, "sha256", want.SHA256)
	err = download.FetchWith(ctx, from, dest, want, d.cfg.Download, func(p download.Progress) {
		progress(engines.Progress{Status: "downloading", Completed: p.Done, Total: p.Total, From: p.From})
	})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &engines.Error{Code: api.CodePullFailed, Err: err}
	}
	size, err := readable(dest)
	if err != nil {
		return &engines.Error{Code: api.CodePullFailed, Err: err}
	}
	progress(engines.Progress{Status: "success", Completed: size, Total: size})
	return nil
}

// DiscardPartial deletes what an unfinished download of m left in the models folder, unless a
// download is still writing it.
func (d *Driver) DiscardPartial(m engines.Model) error {
	if m.MMProj != "" {
		if err := d.DiscardPartial(projector(m)); err != nil {
			return err
		}
	}
	if s, err := parse(m); err != nil || s.Kind == source.KindFile {
		return nil
	}
	dest, err := d.LocalPath(m)
	if err != nil {
		return nil
	}
	return download.Discard(dest)
}

// readable checks that path is a regular GGUF file this process can read, and returns its size.
func readable(path string) (int64, error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, fmt.Errorf("model file %s does not exist: %w", path, engines.ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("model file %s cannot be read: %w", path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("model file %s: %w", path, err)
	}
	if !fi.Mode().IsRegular() {
		return 0, fmt.Errorf("model file %s is not a regular file", path)
	}
	// Checked here, not left to llama-server: it exits 1 on a file that is not a GGUF, and its
	// log thread loses the line saying why about one start in 40 on a busy machine.
	if err := sizing.CheckMagic(f, "model file "+path); err != nil {
		return 0, err
	}
	return fi.Size(), nil
}

// CheckArgs validates extra engine arguments against the allowlist, so a request can be refused
// before anything is pulled. The error is an *engines.Error with code BadRequest that names the
// allowlist.
func (d *Driver) CheckArgs(args []string) error {
	_, err := checkArgs(args, d.cfg.ExtraArgs)
	return err
}

// CheckName refuses a name llama-server cannot serve a model under: --alias is a
// comma-separated list, so "a,b" would serve the model as "a" and "b" and never as "a,b".
func (d *Driver) CheckName(name string) error {
	if strings.Contains(name, ",") {
		return &engines.Error{Code: api.CodeBadRequest, Err: fmt.Errorf(
			"model name %q has a comma, and llama-server splits its --alias on commas: choose a name without one", name)}
	}
	return nil
}

// alias is the name m is served under.
func alias(m engines.Model) string {
	if m.Name != "" {
		return m.Name
	}
	if s, err := source.Parse(m.Source); err == nil && s.ModelName() != "" {
		return s.ModelName()
	}
	return m.ID
}

// Load starts llama-server for m and returns once /health answers 200 and the server on the
// port serves m's alias. A placement already running is returned as it is.
func (d *Driver) Load(ctx context.Context, m engines.Model) (engines.Instance, error) {
	if m.ID == "" || !filepath.IsLocal(m.ID) || filepath.Base(m.ID) != m.ID {
		return nil, &engines.Error{Code: api.CodeBadRequest, Err: fmt.Errorf("placement id %q cannot name a log file", m.ID)}
	}
	extra, err := checkArgs(m.Args, d.cfg.ExtraArgs)
	if err != nil {
		return nil, err
	}
	bin, err := d.binary()
	if err != nil {
		return nil, &engines.Error{Code: api.CodeEngineUnavailable, Err: err}
	}
	path := m.Path
	if path == "" {
		if path, err = d.LocalPath(m); err != nil {
			return nil, err
		}
	}
	if _, err := readable(path); err != nil {
		return nil, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("%w (pull it first)", err)}
	}
	mmproj, err := d.projectorArgs(m)
	if err != nil {
		return nil, err
	}

	d.mu.Lock()
	if inst, ok := d.instances[m.ID]; ok && !inst.exited() {
		d.mu.Unlock()
		return inst, nil
	}
	if _, ok := d.starting[m.ID]; ok {
		d.mu.Unlock()
		return nil, &engines.Error{Code: api.CodeConflict, Err: fmt.Errorf("placement %s is already starting", m.ID)}
	}
	parent := ctx
	ctx, cancel := context.WithCancel(ctx)
	st := &start{cancel: cancel, done: make(chan struct{})}
	d.starting[m.ID] = st
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.starting, m.ID)
		d.mu.Unlock()
		cancel()
		close(st.done)
	}()

	ctxSize := m.Context
	if ctxSize <= 0 {
		ctxSize = api.DefaultContext
	}
	slots, extra := takeSlots(extra)
	name := alias(m)
	if err := d.CheckName(name); err != nil {
		return nil, err
	}
	env := engineEnv(os.Environ(), d.cfg.Env)
	logPath := filepath.Join(d.cfg.LogDir, m.ID+".log")
	for attempt := 1; ; attempt++ {
		port, err := d.freePort()
		if err != nil {
			return nil, &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("finding a free port: %w", err)}
		}
		args := append(append([]string{"-m", path, "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--alias", name, "--metrics"},
			memoryArgs(ctxSize, slots, m.CacheBytes)...), extra...)
		args = append(append(args, rpcArgs(m.RPC, m.TensorSplit)...), mmproj...)
		d.log.Info("starting", "placement", m.ID, "binary", bin, "args", args, "log", logPath)
		inst, err := launch(bin, args, env, m.ID, name, port, logPath, d.cfg.MaxLogBytes, d.cfg.StopGrace)
		if err != nil {
			return nil, err
		}
		err = inst.waitReady(ctx, d.cfg.HealthTimeout, m.Sent)
		if err == nil {
			d.mu.Lock()
			if ctx.Err() != nil { // an Unload came just as it became ready
				d.mu.Unlock()
				inst.stop(context.WithoutCancel(ctx), d.cfg.StopGrace)
				return nil, unloadedWhileStarting(parent, m.ID)
			}
			d.instances[m.ID] = inst
			d.mu.Unlock()
			d.log.Info("ready", "placement", m.ID, "endpoint", inst.Endpoint(), "pid", inst.Pid())
			return inst, nil
		}
		inst.stop(context.WithoutCancel(ctx), d.cfg.StopGrace)
		if ctx.Err() != nil {
			return nil, unloadedWhileStarting(parent, m.ID)
		}
		if !errors.Is(err, errBindCollision) {
			return nil, err
		}
		d.log.Warn("port taken by another process; retrying on another", "placement", m.ID, "port", port, "attempt", attempt)
		if attempt == startAttempts {
			msg := fmt.Sprintf("llama-server could not get a free port in %d attempts: another process took each one first", startAttempts)
			if tail := tailLines(logPath, tailLinesInErrors); tail != "" {
				msg += "; last log lines:\n" + tail
			}
			return nil, &engines.Error{Code: api.CodeEngineError, Err: errors.New(msg)}
		}
	}
}

// unloadedWhileStarting is Load's error when its start was cancelled: the caller's context
// ended, or an Unload came.
func unloadedWhileStarting(parent context.Context, id string) error {
	if err := parent.Err(); err != nil {
		return err
	}
	return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("placement %s was unloaded while llama-server started", id)}
}

// start is a Load in progress, which Unload can cancel and wait for.
type start struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// instance is the running instance of placement id.
func (d *Driver) instance(id string) (*Instance, error) {
	d.mu.Lock()
	inst, ok := d.instances[id]
	d.mu.Unlock()
	if !ok {
		return nil, &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("placement %s has no llama-server running", id)}
	}
	if inst.exited() {
		if err := inst.Err(); err != nil {
			return nil, err
		}
		return nil, &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("placement %s's llama-server was stopped", id)}
	}
	return inst, nil
}

// Health checks m's own process: it must be running and answer /health with 200 (503 while it
// loads is EngineUnavailable).
func (d *Driver) Health(ctx context.Context, m engines.Model) error {
	inst, err := d.instance(m.ID)
	if err != nil {
		return err
	}
	status, err := inst.get(ctx, "/health", nil)
	switch {
	case err != nil:
		if inst.exited() {
			return inst.Err()
		}
		return &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("llama-server for %s does not answer: %w", m.ID, err)}
	case status == http.StatusServiceUnavailable:
		return &engines.Error{Code: api.CodeEngineUnavailable, Err: fmt.Errorf("llama-server for %s is loading the model", m.ID)}
	case status != http.StatusOK:
		return &engines.Error{Code: api.CodeEngineError, Err: fmt.Errorf("llama-server for %s answered /health with %d", m.ID, status)}
	}
	return nil
}

// Unload stops m's llama-server (SIGTERM, SIGKILL after the grace period or when ctx ends) and
// waits for it to exit; a start in progress is cancelled and waited for. A placement with no
// process is already unloaded.
func (d *Driver) Unload(ctx context.Context, m engines.Model) error {
	d.mu.Lock()
	inst, ok := d.instances[m.ID]
	delete(d.instances, m.ID)
	st := d.starting[m.ID]
	d.mu.Unlock()
	if st != nil {
		// A start in progress is cancelled; it stops its process before it returns.
		st.cancel()
		select {
		case <-st.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if !ok {
		return nil
	}
	inst.stop(ctx, d.cfg.StopGrace)
	d.log.Info("stopped", "placement", m.ID)
	return nil
}

// StopAll stops every llama-server the driver started, for the agent's shutdown.
func (d *Driver) StopAll(ctx context.Context) {
	d.mu.Lock()
	all := d.instances
	d.instances = map[string]*Instance{}
	d.mu.Unlock()
	var wg sync.WaitGroup
	for _, inst := range all {
		wg.Go(func() { inst.stop(ctx, d.cfg.StopGrace) })
	}
	wg.Wait()
}

// Loaded lists the aliases of the running instances, sorted.
func (d *Driver) Loaded(ctx context.Context) ([]string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	names := []string{}
	for _, inst := range d.instances {
		if !inst.exited() {
			names = append(names, inst.alias)
		}
	}
	slices.Sort(names)
	return names, nil
}

// downloadName is where an https source is stored under the models folder: a folder per host,
// and a file named by a hash of the whole URL (two URLs may end in the same file name) and the
// URL's own file name, which people recognise.
func downloadName(rawURL string) string {
	host, name := "unknown-host", "model.gguf"
	if u, err := url.Parse(rawURL); err == nil {
		host = strings.ReplaceAll(u.Host, ":", "_")
		if b := path.Base(u.Path); b != "." && b != "/" {
			name = b
		}
	}
	sum := sha256.Sum256([]byte(rawURL))
	return filepath.Join(host, hex.EncodeToString(sum[:6])+"-"+name)
}
