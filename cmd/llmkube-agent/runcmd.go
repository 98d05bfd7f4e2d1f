package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/node"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/hailo"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
	"github.com/llmkube/mesh/hwprobe"
	"github.com/llmkube/mesh/mesh/discovery"
	"github.com/llmkube/mesh/version"
)

// envJoin carries the join string when no flag does.
const envJoin = "LLMKUBE_JOIN"

// runOptions are run's flags.
type runOptions struct {
	stateDir, modelsDir string
	allowTempStore      bool
	nodeName            string

	listen, advertise string
	metricsOpen       bool
	lanHTTP           bool

	joinString, joinFile string
	noMesh               bool
	bind                 string
	gossipPort           int
	seeds                []string
	noMDNS               bool
	mdnsInterface        string
	meshProfile          string

	runtimes          string
	llamaServer       string
	ggufDirs          []string
	ollamaURL         string
	hailoURL          string
	hailoRestart      string
	hailoManifestsDir string
	hailoLibraryURL   string
	hfBase            string
	ollamaRegistry    string
	allowPrivate      bool
	allowHTTP         bool
	fetchImages       bool
	serveUploads      int
	serveRate         string
	hailoMirror       string
	ollamaMirror      bool
	ollamaModels      string

	hwRoot, hwOS, hwArch string

	memoryBudget       string
	memoryFraction     float64
	memoryCheckMode    string
	evict              bool
	idleAfter          time.Duration
	idleTTL            time.Duration
	namespaces         []string
	labels             []string
	anonymousNamespace string
	onDemand           []string

	healthInterval time.Duration
	restartBackoff time.Duration

	logFormat, logLevel string
}

func runCommand(e env) *cobra.Command {
	o := &runOptions{}
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the agent",
		Long: `run probes the host, opens the state folder and model store, restores the placements it had,
joins the mesh and serves the agent API (authenticated with tokens derived from the mesh secret).

The mesh secret comes from --join-string, $LLMKUBE_JOIN, --join-file or the state folder's mesh.json,
in that order; without any, a new single-host mesh is made and saved there (share its join string,
from mesh.json or ` + "`llmkube-agent init`" + `, to add hosts).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAgent(cmd.Context(), o, e)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.stateDir, "state-dir", "", "state folder: placements, identity, mesh secret (default: $XDG_DATA_HOME/llmkube/agent; macOS: ~/Library/Application Support/llmkube/agent)")
	f.StringVar(&o.modelsDir, "models-dir", "", "model store for downloaded GGUF files (default: next to the state folder, …/llmkube/models)")
	f.BoolVar(&o.allowTempStore, "allow-temp-store", false, "accept a state folder and model store under the temporary folder: for tests and demos only, never a real host")
	f.StringVar(&o.nodeName, "node-name", "", "this host's name in the mesh, unique (default: the hostname plus a short id, kept in the state folder)")

	f.StringVar(&o.listen, "listen", ":7777", "API address; every route but /healthz and /readyz needs a token, engines stay on loopback")
	f.StringVar(&o.advertise, "advertise", "", "API address peers reach this host at (default: the listen address, or this host's address on its default route)")
	f.BoolVar(&o.lanHTTP, "lan-http", false, "also serve plain HTTP to other hosts, for clients that cannot speak TLS: the gateway's routes only, never the admin token; the LAN reads what crosses it (the doctor shows it). Without it the LAN is served over TLS with the mesh's CA (llmkube-agent ca), loopback in plain")
	f.BoolVar(&o.metricsOpen, "metrics-open", false, "serve /metrics without a token (by default it needs the admin token: it shows every namespace)")

	f.StringVar(&o.joinString, "join-string", "", "the mesh's join string (from 'llmkube-agent init'); also $"+envJoin)
	f.StringVar(&o.joinFile, "join-file", "", "read the join string from this file (mode 0600)")
	f.BoolVar(&o.noMesh, "no-mesh", false, "run as a single host without gossip (the API still works)")
	f.StringVar(&o.bind, "bind", "", "gossip bind address (default: every interface)")
	f.IntVar(&o.gossipPort, "gossip-port", 7946, "gossip port, UDP and TCP (0: any free port, needs --no-mdns)")
	f.StringSliceVar(&o.seeds, "join", nil, "gossip `host:port` of peers to join (repeat or comma-separate); added to the join string's seeds")
	f.BoolVar(&o.noMDNS, "no-mdns", false, "do not announce or browse for peers over mDNS (use --join seeds)")
	f.StringVar(&o.mdnsInterface, "mdns-interface", "", "use only this interface for mDNS")
	f.StringVar(&o.meshProfile, "mesh-profile", "lan", "gossip timings: lan, wan (several sites over seeds) or local (one machine: tests and demos)")

	f.StringVar(&o.runtimes, "runtimes", "", "runtimes to use, comma-separated: llama-server, ollama, hailo-ollama (default: all, each used when present)")
	f.StringVar(&o.llamaServer, "llama-server", "", "path to llama-server (default: looked up on PATH)")
	f.StringSliceVar(&o.ggufDirs, "gguf-dir", nil, "folders whose GGUF files the console offers as file:// sources on this host, and the only ones besides the model store a namespace token may place from (repeat or comma-separate)")
	f.StringVar(&o.ollamaURL, "ollama-url", ollama.DefaultURL, "Ollama daemon")
	f.StringVar(&o.hailoURL, "hailo-url", hailo.DefaultURL, "hailo-ollama daemon")
	f.StringVar(&o.hailoRestart, "hailo-restart-command", "", "command that restarts hailo-ollama (e.g. \"sudo -n systemctl restart hailo-ollama\"); on releases that keep the device between loads (5.3) the agent runs it before loading a model after another, since answers degrade otherwise")
	f.StringVar(&o.hailoManifestsDir, "hailo-manifests-dir", "", "hailo-ollama's manifests folder, for sizing hailo:// models (default: hailo-ollama's own lookup)")
	f.StringVar(&o.hailoLibraryURL, "hailo-library-url", "", "Hailo's model library, for sizing hailo:// models (default: "+sizing.DefaultHailoLibraryURL+")")
	f.StringVar(&o.hfBase, "hf-base", "", "Hugging Face base URL or mirror for hf:// sources (default: https://huggingface.co)")
	f.StringVar(&o.ollamaRegistry, "ollama-registry", "", "Ollama registry for sizing ollama:// models (default: "+sizing.DefaultOllamaRegistry+")")
	f.BoolVar(&o.allowPrivate, "allow-private-downloads", false, "let model sizing and downloads reach loopback, private and link-local addresses (a LAN mirror; off: a model URL is user input)")
	f.BoolVar(&o.allowHTTP, "allow-http", false, "accept plain http:// model sources (a LAN mirror)")
	f.BoolVar(&o.fetchImages, "fetch-image-urls", false, "fetch the images chats name by http(s) URL, through the same guard as downloads (public addresses only unless --allow-private-downloads), at most 5 MiB a request; off: only images sent in the request are taken")
	f.IntVar(&o.serveUploads, "serve-uploads", agent.DefaultServeUploads, "how many copies of model files this host serves its peers at once")
	f.StringVar(&o.serveRate, "serve-rate", "0", "bytes a second all copies served to peers may use together, such as 50MB (0: unlimited)")
	f.BoolVar(&o.ollamaMirror, "ollama-mirror", true, "serve this host's Ollama models (blobs by digest, manifests by name) to the mesh's agents, and pull a model another host's Ollama holds from it through a registry mirror at http://127.0.0.1:<port>"+agent.OllamaRegistryPath+" (a daemon on this host only)")
	f.StringVar(&o.ollamaModels, "ollama-models", "", "Ollama's models folder, read to serve its models to peers (default: $OLLAMA_MODELS, /usr/share/ollama/.ollama/models, ~/.ollama/models: the first readable)")
	f.StringVar(&o.hailoMirror, "hailo-library-mirror", "", "serve this host's hailo-ollama a mirror of Hailo's model library at this URL (such as "+sizing.DefaultHailoLibraryURL+") at http://127.0.0.1:<port>"+agent.HailoLibraryPath+": HEFs come from the model store, then the mesh's peers, then that URL; set it as hailo-ollama's library and --hailo-library-url")

	f.StringVar(&o.hwRoot, "hwprobe-root", "/", "read the host's files under this folder: a recorded host for demos (the simulated Pi 5 + Hailo)")
	f.StringVar(&o.hwOS, "hwprobe-os", "", "OS of the recorded host under --hwprobe-root (default: this one)")
	f.StringVar(&o.hwArch, "hwprobe-arch", "", "architecture of the recorded host under --hwprobe-root (default: this one)")

	f.StringVar(&o.memoryBudget, "memory-budget", "", "memory for models, e.g. 12GiB (default: 0.67 of the cgroup-aware total up to 36 GiB, 0.75 above)")
	f.Float64Var(&o.memoryFraction, "memory-fraction", 0, "budget as a fraction of the total, in (0, 1] (default 0.67/0.75)")
	f.StringVar(&o.memoryCheckMode, "memory-check-mode", agent.MemoryCheckFail, "fail: refuse a model whose size cannot be known or that does not fit; warn: admit it with a warning")
	f.BoolVar(&o.evict, "evict", false, "make room for a placement by unloading idle placements of lower priority, least recently used first (never a protected one)")
	f.DurationVar(&o.idleAfter, "idle-after", 10*time.Minute, "how long a placement must go unused to count as idle for --evict")
	f.DurationVar(&o.idleTTL, "idle-ttl", 0, "how long a placement may go with no request before it sleeps (engine unloaded, budget freed, loaded again by the next request); 0 never sleeps")
	f.StringSliceVar(&o.namespaces, "namespaces", nil, "namespaces allowed on this host, comma-separated (default: any)")
	f.StringArrayVar(&o.labels, "label", nil, fmt.Sprintf("a label of this host, key=value (repeatable, at most %d): an intent placed with --label k=v runs only on hosts that carry it", api.MaxLabels))
	f.StringSliceVar(&o.onDemand, "on-demand", nil, "namespaces whose requests for a model no host runs place it on the best host and wait for it (an Ollama name: ollama://NAME, or a Hailo zoo model), comma-separated; * for every namespace (default: off); Ollama's /api/pull too")
	f.StringVar(&o.anonymousNamespace, "anonymous-namespace", "", "serve the listing and inference routes without a token as this one namespace, for clients that cannot send one (Home Assistant's hailo-ollama integration); off by default, shown in /v1/host")

	f.DurationVar(&o.healthInterval, "health-interval", 5*time.Second, "how often each engine is health-checked")
	f.DurationVar(&o.restartBackoff, "restart-backoff", time.Second, "first wait before restarting a failed engine (doubles up to a minute)")
	// Taken and ignored, so a unit file written for an older agent still starts it.
	f.Duration("release-code-after", 0, "")
	_ = f.MarkDeprecated("release-code-after", "the agent no longer hands its code pages back; the flag does nothing")

	f.StringVar(&o.logFormat, "log-format", "text", "log format: text or json (logs go to stderr)")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// runAgent runs the agent until ctx ends.
func runAgent(ctx context.Context, o *runOptions, e env) error {
	log, err := newLogger(e.stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	if err := supportedOS(runtime.GOOS); err != nil {
		return err
	}
	info := hwprobe.Probe(ctx, hwprobe.Options{Root: o.hwRoot, OS: o.hwOS, Arch: o.hwArch})
	if err := supportedOS(info.OS); err != nil {
		return err
	}
	budget, err := o.budget()
	if err != nil {
		return err
	}
	labels, err := api.ParseLabels(o.labels)
	if err != nil {
		return usageError{fmt.Errorf("--label: %w", err)}
	}
	runtimes, explicit, err := parseRuntimes(o.runtimes)
	if err != nil {
		return err
	}
	if !o.noMesh && !o.noMDNS && o.gossipPort == 0 {
		return usageError{errors.New("--gossip-port 0 cannot be announced over mDNS: give a port or --no-mdns")}
	}

	dirs, derr := defaultDirs(e, runtime.GOOS) // this machine's folders, whatever host the probe describes
	if o.stateDir == "" || o.modelsDir == "" {
		if derr != nil {
			return fmt.Errorf("%w: give --state-dir and --models-dir", derr)
		}
	}
	if o.stateDir == "" {
		o.stateDir = dirs.State
	}
	if o.modelsDir == "" {
		o.modelsDir = dirs.Models
	}
	sd, err := openStateDir(o.stateDir, o.allowTempStore)
	if err != nil {
		return err
	}
	defer sd.Close()
	join, err := loadJoin(o, e, sd, log)
	if err != nil {
		return err
	}

	// One policy for every request made for a source: sizing it, then downloading it.
	if u, err := url.Parse(o.hailoMirror); o.hailoMirror != "" && (err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "") {
		return usageError{fmt.Errorf("--hailo-library-mirror %q: want the library's http(s) URL, such as %s", o.hailoMirror, sizing.DefaultHailoLibraryURL)}
	}
	serveRate, err := agent.ParseServeRate(o.serveRate)
	if err != nil {
		return usageError{err}
	}
	if o.serveUploads < 1 {
		return usageError{fmt.Errorf("--serve-uploads %d: want 1 or more", o.serveUploads)}
	}
	// Peers holding a file are asked for it before the origin, once the mesh is up.
	peers := &download.Peers{}
	guard := download.Options{AllowPrivate: o.allowPrivate, Peers: peers, Log: log.With("part", "download")}
	drivers, err := buildDrivers(ctx, o, runtimes, explicit, sd.Path(), guard, log)
	if err != nil {
		return err
	}
	sizer := &sizing.Sizer{
		Guard:             guard,
		HFBase:            o.hfBase,
		OllamaRegistry:    o.ollamaRegistry,
		HailoManifestsDir: o.hailoManifestsDir,
		HailoLibraryURL:   o.hailoLibraryURL,
		Log:               log.With("part", "sizing"),
	}
	if slices.Contains(runtimes, api.RuntimeOllama) {
		sizer.OllamaDaemon = o.ollamaURL
	}

	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("API listener: %w", err)
	}
	defer ln.Close()
	// One address for the API and the gossip, so what peers gossip about us is what they dial.
	lan := discovery.LANAddr(o.bind, o.mdnsInterface)
	apiAddr, err := advertiseAddr(o.advertise, ln.Addr().(*net.TCPAddr), lan)
	if err != nil {
		return err
	}

	acfg := agent.Config{
		State:          sd,
		ModelsDir:      o.modelsDir,
		AllowTempStore: o.allowTempStore,
		NodeName:       o.nodeName,
		Host:           info,
		Reprobe: func(ctx context.Context) hwprobe.Info {
			return hwprobe.ProbeLive(ctx, hwprobe.Options{Root: o.hwRoot, OS: o.hwOS, Arch: o.hwArch})
		},
		Drivers:            drivers,
		Chosen:             explicit,
		Sizer:              sizer,
		Budget:             budget,
		MemoryFraction:     o.memoryFraction,
		MemoryCheckMode:    o.memoryCheckMode,
		Evict:              o.evict,
		IdleAfter:          o.idleAfter,
		IdleTTL:            o.idleTTL,
		Namespaces:         o.namespaces,
		Labels:             labels,
		AnonymousNamespace: o.anonymousNamespace,
		AllowHTTP:          o.allowHTTP,
		GGUFDirs:           o.ggufDirs,
		Version:            version.Get().Version,
		HealthInterval:     o.healthInterval,
		RestartBackoff:     o.restartBackoff,
		ServeUploads:       o.serveUploads,
		ServeRate:          serveRate,
		HailoLibrary:       hailoMirror(o, guard),
		OllamaMirror:       ollamaMirror(o, drivers, ln, guard),
		Log:                log.With("part", "agent"),
	}
	nc := node.Config{Join: join, Agent: acfg, Listener: ln, APIAddr: apiAddr, OpenMetrics: o.metricsOpen, LANHTTP: o.lanHTTP, OnDemand: o.onDemand, Log: log}
	if o.fetchImages {
		nc.FetchImages = &guard
	}
	if !o.noMesh {
		nc.Peers = peers
		nc.Mesh = &node.MeshConfig{
			Bind: o.bind, Advertise: lan.String(), Port: o.gossipPort, Seeds: o.seeds,
			MDNS: !o.noMDNS, MDNSInterface: o.mdnsInterface, Profile: o.meshProfile,
		}
	}
	n, err := node.Start(ctx, nc)
	if err != nil {
		return err
	}
	return n.Wait()
}

// budget parses --memory-budget.
func (o *runOptions) budget() (int64, error) {
	if o.memoryBudget == "" {
		return 0, nil
	}
	n, err := api.ParseBytes(o.memoryBudget)
	if err != nil || n <= 0 {
		return 0, usageError{fmt.Errorf("--memory-budget %q: want a size such as 12GiB", o.memoryBudget)}
	}
	return n, nil
}

// parseRuntimes reads --runtimes; explicit says the operator chose them.
func parseRuntimes(s string) (rs []api.Runtime, explicit bool, err error) {
	if strings.TrimSpace(s) == "" {
		return slices.Clone(api.Runtimes), false, nil
	}
	for _, part := range strings.Split(s, ",") {
		r := api.Runtime(strings.TrimSpace(part))
		if !r.Valid() {
			return nil, false, usageError{fmt.Errorf("--runtimes: unknown runtime %q; known: llama-server, ollama, hailo-ollama", part)}
		}
		if !slices.Contains(rs, r) {
			rs = append(rs, r)
		}
	}
	return rs, true, nil
}

// buildDrivers makes one driver per selected runtime. A runtime the operator named that is not
// installed stops the start with how to install it; one merely detected is used when present.
func buildDrivers(ctx context.Context, o *runOptions, rs []api.Runtime, explicit bool, stateDir string, guard download.Options, log *slog.Logger) ([]engines.Driver, error) {
	var out []engines.Driver
	for _, r := range rs {
		var d engines.Driver
		var err error
		switch r {
		case api.RuntimeLlamaServer:
			d, err = llamaserver.New(llamaserver.Config{
				Binary:    o.llamaServer,
				ModelsDir: o.modelsDir,
				HFBase:    o.hfBase,
				LogDir:    filepath.Join(stateDir, "logs"),
				GGUFDirs:  o.ggufDirs,
				Download:  guard,
			}, log.With("part", "engine"))
		case api.RuntimeOllama:
			d, err = ollama.New(ollama.Config{URL: o.ollamaURL}, log.With("part", "engine"))
		case api.RuntimeHailoOllama:
			var hd *hailo.Driver
			hd, err = hailo.New(hailo.Config{URL: o.hailoURL}, log.With("part", "engine"))
			if err == nil && strings.TrimSpace(o.hailoRestart) != "" {
				hd.RestartBetweenModels(commandRunner(o.hailoRestart))
			}
			d = hd
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r, err)
		}
		// llama-server is a program this host must have; the daemons may simply not be up yet
		// (the agent keeps looking for them).
		if explicit && r == api.RuntimeLlamaServer {
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			eng := d.Detect(dctx)
			cancel()
			if !eng.Present {
				return nil, fmt.Errorf("--runtimes names llama-server, but it is not usable here: %s", eng.Detail)
			}
		}
		out = append(out, d)
		if r == api.RuntimeLlamaServer {
			// llama.cpp's RPC worker, where it is installed beside llama-server, takes this
			// host's share of splits; a host without it takes none, and says nothing of it.
			rd, err := llamaserver.NewRPC(llamaserver.RPCConfig{LlamaServer: o.llamaServer, LogDir: filepath.Join(stateDir, "logs"),
				CacheDir: filepath.Join(stateDir, "rpc-cache")}, log.With("part", "engine"))
			if err != nil {
				return nil, fmt.Errorf("rpc-server: %w", err)
			}
			dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			present := rd.Detect(dctx).Present
			cancel()
			if present {
				out = append(out, rd)
			}
		}
	}
	return out, nil
}

// givenJoin is the join string given from outside the state folder, and where from:
// --join-string, $LLMKUBE_JOIN, then --join-file; from is "" when none is given.
func givenJoin(e env, joinString, joinFile string) (j api.Join, from string, err error) {
	switch {
	case joinString != "":
		j, err = api.ParseJoin(joinString)
		from = "--join-string"
	case e.getenv(envJoin) != "":
		j, err = api.ParseJoin(e.getenv(envJoin))
		from = "$" + envJoin
	case joinFile != "":
		var ok bool
		j, ok, err = state.LoadJoinFile(joinFile)
		if err == nil && !ok {
			err = fmt.Errorf("--join-file %s does not exist", joinFile)
		}
		from = joinFile
	}
	if err != nil {
		return api.Join{}, from, usageError{fmt.Errorf("%s: %w", from, err)}
	}
	return j, from, nil
}

// loadJoin finds the mesh's join string: --join-string, $LLMKUBE_JOIN, --join-file, the state
// folder's mesh.json; without any it makes a new single-host mesh and saves it there. A join
// string given from outside is saved when the state folder has none, so a restart needs no flag.
func loadJoin(o *runOptions, e env, sd *state.Dir, log *slog.Logger) (api.Join, error) {
	j, from, err := givenJoin(e, o.joinString, o.joinFile)
	if err != nil {
		return api.Join{}, err
	}
	saved, ok, err := sd.LoadJoin()
	if err != nil {
		return api.Join{}, err
	}
	path := filepath.Join(sd.Path(), state.JoinFile)
	switch {
	case from != "" && !ok:
		if err := sd.SaveJoin(j); err != nil {
			return api.Join{}, err
		}
		log.Info("joined mesh; join string saved for restarts", "mesh", j.MeshID, "from", from, "saved", path)
	case from != "":
		if saved.MeshID != j.MeshID || !slices.Equal(saved.Secret, j.Secret) {
			log.Warn("the join string given differs from the one saved; using the one given, leaving the saved one alone", "mesh", j.MeshID, "from", from, "saved", path, "saved_mesh", saved.MeshID)
		}
	case ok:
		j = saved
		log.Info("mesh secret read", "mesh", j.MeshID, "from", path)
	default:
		secret, err := api.NewSecret()
		if err != nil {
			return api.Join{}, err
		}
		id, err := api.NewMeshID()
		if err != nil {
			return api.Join{}, err
		}
		j = api.Join{MeshID: id, Secret: secret}
		if err := sd.SaveJoin(j); err != nil {
			return api.Join{}, err
		}
		log.Warn("no mesh secret given: made a new single-host mesh; share its join string (in the file named here) to add hosts",
			"mesh", j.MeshID, "saved", path)
	}
	return j, nil
}

// advertiseAddr is the API address peers use: --advertise, else the listener's address when it
// names one, else the address peers reach this host at on the LAN (discovery.LANAddr: the
// gossip bind address, the mDNS interface, the default route's source, a LAN interface), which
// is loopback only on a host with no network at all.
func advertiseAddr(flag string, ln *net.TCPAddr, lan net.IP) (string, error) {
	if flag != "" {
		if _, _, err := net.SplitHostPort(flag); err != nil {
			return "", usageError{fmt.Errorf("--advertise %q: want host:port", flag)}
		}
		return flag, nil
	}
	port := strconv.Itoa(ln.Port)
	if !ln.IP.IsUnspecified() {
		return net.JoinHostPort(ln.IP.String(), port), nil
	}
	return net.JoinHostPort(lan.String(), port), nil
}

// commandRunner runs a command line (split on spaces, no shell) and reports its failure with
// what it wrote to stderr.
func commandRunner(line string) func(context.Context) error {
	args := strings.Fields(line)
	return func(ctx context.Context) error {
		var stderr bytes.Buffer
		cmd := exec.CommandContext(ctx, args[0], args[1:]...)
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("%s: %w: %s", line, err, strings.TrimSpace(stderr.String()))
		}
		return nil
	}
}

// hailoMirror is the Hailo library mirror --hailo-library-mirror asks for, or nil.
func hailoMirror(o *runOptions, guard download.Options) *agent.HailoLibrary {
	if o.hailoMirror == "" {
		return nil
	}
	return &agent.HailoLibrary{Upstream: o.hailoMirror, Download: guard}
}
