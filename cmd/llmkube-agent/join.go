package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/agent/store"
	"github.com/llmkube/mesh/assets"
	"github.com/llmkube/mesh/engines/llamaserver"
	"github.com/llmkube/mesh/internal/atomicfile"
)

// ServiceRecord is what join leaves in the state folder so that leave undoes exactly that.
const serviceRecord = "service.json"

type serviceRecordDoc struct {
	Manager string    `json:"manager"` // systemd-user | systemd-system | launchd
	Path    string    `json:"path"`    // the service file join wrote
	API     string    `json:"api"`     // where the agent answers, for leave's wait
	Models  string    `json:"models"`  // the model store (leave --purge)
	Written time.Time `json:"written"`
}

func (k managerKind) record() string {
	switch k {
	case systemdUser:
		return "systemd-user"
	case systemdSystem:
		return "systemd-system"
	}
	return "launchd"
}

// ownedRunFlags are run flags the service sets itself: join takes them as its own options.
var ownedRunFlags = []string{"state-dir", "models-dir", "join-file", "join-string"}

type joinOptions struct {
	svc          serviceOptions
	timeout      time.Duration
	peersTimeout time.Duration
	replace      bool
}

func joinCommand(e env) *cobra.Command {
	jo := &joinOptions{}
	run := runCommand(e)
	cmd := &cobra.Command{
		Use:   "join [JOIN-STRING | -] [flags]",
		Short: "Join this host to a mesh: save the secret, install the agent as a service, start it, wait until it has joined",
		Long: `join redeems a join string (from ` + "`llmkube-agent init`" + ` on any host; the argument, - for stdin,
or $` + envJoin + `), stores it 0600 in the state folder, installs the agent as a service of the user who
runs join — a systemd user unit on Linux (--system for a system-wide unit, as root), a launchd agent
on macOS — starts it, and waits until it answers and has joined the mesh. Nothing is written when a
check fails first: the service manager must answer, the selected runtimes' engines must be there,
the folders must be safe and the ports free. It takes every flag of ` + "`llmkube-agent run`" + `, which go into
the service. ` + "`llmkube-agent leave`" + ` undoes it.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return jo.join(cmd.Context(), cmd, run, args, e)
		},
	}
	f := cmd.Flags()
	serviceFlags(f, &jo.svc, false)
	f.DurationVar(&jo.timeout, "timeout", 60*time.Second, "how long to wait for the agent to answer")
	f.DurationVar(&jo.peersTimeout, "peers-timeout", 30*time.Second, "how long to wait for a peer after the agent answers; given, join fails without one (not given, no peer is a warning, and the first host of a mesh listens 5s for mDNS peers)")
	f.BoolVar(&jo.replace, "replace", false, "replace a service that join installed before (stops it first)")
	f.AddFlagSet(run.Flags())
	return cmd
}

func (jo *joinOptions) join(ctx context.Context, cmd *cobra.Command, run *cobra.Command, args []string, e env) error {
	w := e.stdout
	ro := runFlags(run)
	j, err := jo.joinString(args, ro, e)
	if err != nil {
		return err
	}
	jo.svc.stateDir, _ = run.Flags().GetString("state-dir")
	jo.svc.modelsDir, _ = run.Flags().GetString("models-dir")
	extra, err := serviceRunArgs(run.Flags())
	if err != nil {
		return err
	}

	// Checks first: nothing is written until each has passed.
	notes, engineArgs, err := checkEngines(ctx, run.Flags(), e)
	if err != nil {
		return err
	}
	jo.svc.extra = append(extra, engineArgs...)
	plan, err := jo.svc.plan(e)
	if err != nil {
		return err
	}
	if err := plan.mgr.preflight(ctx); err != nil {
		return err
	}
	allowTemp, _ := run.Flags().GetBool("allow-temp-store")
	for _, d := range []struct{ dir, label, flag string }{
		{plan.params.StateDir, "state folder", "--state-dir"},
		{plan.params.ModelsDir, "model store", "--models-dir"},
	} {
		if err := store.Precheck(d.dir, store.Options{GOOS: plan.goos, AllowTemp: allowTemp, Label: d.label, Flag: d.flag}); err != nil {
			return err
		}
	}
	if old, err := os.ReadFile(plan.path); err == nil {
		if !assets.Managed(old) {
			return fmt.Errorf("%s exists and was not written by llmkube-agent: remove it or run that agent as it is; join leaves it alone", plan.path)
		}
		if !jo.replace {
			return fmt.Errorf("this host already joined: %s is installed; `llmkube-agent leave` first, or --replace", plan.path)
		}
		fmt.Fprintf(w, "stopping the service join installed before (%s)\n", plan.path)
		if err := plan.mgr.stop(ctx); err != nil {
			return err
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	apiURL, err := checkPorts(ro.listen, ro.bind, ro.gossipPort, ro.noMesh)
	if err != nil {
		return err
	}

	// Write: the secret, the folders, the service file; then start it.
	sd, err := openStateDir(plan.params.StateDir, allowTemp)
	if err != nil {
		return err
	}
	err = sd.SaveJoin(j)
	if err == nil {
		err = writeRecord(sd.Path(), serviceRecordDoc{
			Manager: plan.mgr.kind.record(), Path: plan.path, API: apiURL, Models: plan.params.ModelsDir, Written: time.Now().UTC(),
		})
	}
	sd.Close() // the lock is the agent's from here on
	if err != nil {
		return err
	}
	if err := os.MkdirAll(plan.params.ModelsDir, 0o700); err != nil {
		return fmt.Errorf("making the model store: %w", err)
	}
	if err := writeServiceFile(plan.path, plan); err != nil {
		return err
	}
	fmt.Fprintf(w, "saved the join string of mesh %q in %s (mode 0600)\n", j.MeshID, plan.params.JoinFile)
	fmt.Fprintf(w, "wrote %s (%s)\n", plan.path, plan.mgr.kind)
	for _, n := range notes {
		fmt.Fprintln(w, n)
	}
	if err := plan.mgr.start(ctx, plan.path); err != nil {
		return fmt.Errorf("starting the service: %w\nundo: llmkube-agent leave", err)
	}
	fmt.Fprintf(w, "started %s\n", plan.mgr.unitName())

	// Wait until it answers and has joined.
	client := apiclient.New(apiURL, api.AdminToken(j.Secret))
	started := time.Now()
	if err := waitHealthy(ctx, apiURL, jo.timeout); err != nil {
		return fmt.Errorf("the agent did not answer at %s within %v: %w\nits log: %s\nundo: llmkube-agent leave", apiURL, jo.timeout, err, plan.mgr.logs(plan.params.LogDir))
	}
	fmt.Fprintf(w, "the agent answers at %s (%.1fs)\n", apiURL, time.Since(started).Seconds())
	joinErr := error(nil)
	if !ro.noMesh {
		joinErr = jo.awaitPeers(ctx, w, client, j, ro, cmd.Flags().Changed("peers-timeout"), started)
	}
	if hint := plan.mgr.lingerHint(ctx); hint != "" {
		fmt.Fprintf(w, "\n%s\n", hint)
	}
	fmt.Fprintf(w, "\nLogs:  %s\nUndo:  llmkube-agent leave%s   (--purge also deletes the state folder and the model store)\n", plan.mgr.logs(plan.params.LogDir), leaveFlags(plan))
	return joinErr
}

// firstHostMDNSWait is how long the first host of a mesh (no seed to join) listens for peers
// that mDNS may find before it says it is the first.
const firstHostMDNSWait = 5 * time.Second

// awaitPeers waits for another member of the mesh and says what it found. No peer fails join
// only when the user asked to wait for one (--peers-timeout given): the first host of a mesh
// (a Pi beside a laptop) has none, which is a fact to state, and a host whose seeds do not
// answer yet gets a warning with the agent's doctor, since the agent keeps looking.
func (jo *joinOptions) awaitPeers(ctx context.Context, w io.Writer, client *apiclient.Client, j api.Join, ro runFlagsView, asked bool, started time.Time) error {
	wait := jo.peersTimeout
	first := len(j.Seeds) == 0 && len(ro.seeds) == 0
	if first && !asked {
		wait = min(wait, firstHostMDNSWait)
		if ro.noMDNS {
			wait = 0
		}
	}
	var peers []string
	if wait > 0 {
		var err error
		if peers, err = waitPeers(ctx, client, wait); err != nil {
			return err
		}
	}
	switch {
	case len(peers) > 0:
		fmt.Fprintf(w, "joined mesh %q: %s (%.1fs)\n", j.MeshID, strings.Join(peers, ", "), time.Since(started).Seconds())
		return nil
	case wait == 0 && !first:
		return nil // --peers-timeout 0: not waited for, nothing to say
	case asked:
		err := fmt.Errorf("the agent runs, but found no other member of mesh %q within %v", j.MeshID, wait)
		fmt.Fprintf(w, "\n%v. What the doctor sees:\n", err)
		writeDoctor(ctx, w, client)
		return err
	case first:
		fmt.Fprintf(w, "this is the first host of mesh %q: no other member yet. Other hosts join it with the same join string (`llmkube-agent join` there).\n", j.MeshID)
		return nil
	}
	fmt.Fprintf(w, "\nwarning: no other member of mesh %q answered within %v; the agent keeps looking (--peers-timeout makes this an error). What the doctor sees:\n", j.MeshID, wait)
	writeDoctor(ctx, w, client)
	return nil
}

// writeRecord saves what join installed, for leave.
func writeRecord(stateDir string, r serviceRecordDoc) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return atomicfile.WriteFile(filepath.Join(stateDir, serviceRecord), append(b, '\n'), 0o600)
}

// runFlagsView is the part of run's options join reads to check ports and wait for the agent.
type runFlagsView struct {
	listen, bind   string
	gossipPort     int
	noMesh, noMDNS bool
	seeds          []string
}

func runFlags(run *cobra.Command) runFlagsView {
	f := run.Flags()
	var v runFlagsView
	v.listen, _ = f.GetString("listen")
	v.bind, _ = f.GetString("bind")
	v.gossipPort, _ = f.GetInt("gossip-port")
	v.noMesh, _ = f.GetBool("no-mesh")
	v.noMDNS, _ = f.GetBool("no-mdns")
	v.seeds, _ = f.GetStringSlice("join")
	return v
}

// joinString redeems the argument ("-": stdin) or $LLMKUBE_JOIN. --join-string and --join-file
// are not join's: the secret goes into the state folder, where the service reads it.
func (jo *joinOptions) joinString(args []string, _ runFlagsView, e env) (api.Join, error) {
	s := ""
	switch {
	case len(args) == 1 && args[0] == "-":
		b, err := io.ReadAll(io.LimitReader(os.Stdin, 64<<10))
		if err != nil {
			return api.Join{}, err
		}
		s = strings.TrimSpace(string(b))
	case len(args) == 1:
		s = args[0]
	default:
		s = e.getenv(envJoin)
	}
	if s == "" {
		return api.Join{}, usageError{errors.New("no join string: give it as the argument, - to read it from stdin, or in $" + envJoin + " (`llmkube-agent init` on any host of the mesh prints it)")}
	}
	j, err := api.ParseJoin(s)
	if err != nil {
		return api.Join{}, usageError{fmt.Errorf("the join string: %w", err)}
	}
	return j, nil
}

// serviceRunArgs renders the run flags the user gave join as arguments for the service's command
// line, in flag order; the flags the service sets itself are left out.
func serviceRunArgs(f *pflag.FlagSet) ([]string, error) {
	var out []string
	var err error
	f.VisitAll(func(fl *pflag.Flag) {
		if !fl.Changed || slices.Contains(ownedRunFlags, fl.Name) {
			if fl.Changed && fl.Name == "join-string" {
				err = usageError{errors.New("--join-string: give the join string as join's argument; it is saved in the state folder, never in the service file")}
			}
			return
		}
		if sv, ok := fl.Value.(pflag.SliceValue); ok {
			for _, v := range sv.GetSlice() {
				out = append(out, "--"+fl.Name+"="+v)
			}
			return
		}
		out = append(out, "--"+fl.Name+"="+fl.Value.String())
	})
	return out, err
}

// checkEngines refuses a runtime the user selected whose engine this host does not have, and says
// which runtimes are off when they were only detected. It also pins llama-server's absolute path:
// the service manager's PATH is not the user's shell's.
func checkEngines(ctx context.Context, f *pflag.FlagSet, e env) (notes, args []string, err error) {
	spec, _ := f.GetString("runtimes")
	rs, explicit, err := parseRuntimes(spec)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rs {
		switch r {
		case api.RuntimeLlamaServer:
			bin, _ := f.GetString("llama-server")
			// Only Detect runs: the log folder is never written, and the temporary folder exists.
			d, derr := llamaserver.New(llamaserver.Config{Binary: bin, LogDir: os.TempDir()}, nil)
			var eng api.Engine
			if derr == nil {
				dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				eng = d.Detect(dctx)
				cancel()
			} else {
				eng.Detail = derr.Error()
			}
			switch {
			case eng.Present && eng.Healthy:
				if !f.Changed("llama-server") {
					if abs, aerr := filepath.Abs(eng.Address); aerr == nil {
						args = append(args, "--llama-server="+abs)
					}
				}
				notes = append(notes, fmt.Sprintf("llama-server: %s %s", eng.Address, eng.Version))
			case explicit:
				return nil, nil, fmt.Errorf("--runtimes names llama-server, but it is not usable here: %s; install it or leave it out of --runtimes", eng.Detail)
			default:
				notes = append(notes, "llama-server: not found, so that runtime is off ("+eng.Detail+"); --runtimes picks the others explicitly")
			}
		case api.RuntimeOllama, api.RuntimeHailoOllama:
			flag, prog := "ollama-url", "ollama"
			if r == api.RuntimeHailoOllama {
				flag, prog = "hailo-url", "hailo-ollama"
			}
			url, _ := f.GetString(flag)
			if daemonAnswers(ctx, url) {
				notes = append(notes, fmt.Sprintf("%s: answers at %s", r, url))
				continue
			}
			if _, perr := lookPathIn(prog, e.getenv("PATH")); perr != nil && explicit {
				return nil, nil, fmt.Errorf("--runtimes names %s, but nothing answers at %s and %s is not installed; install and start it, or leave it out of --runtimes", r, url, prog)
			}
			if explicit {
				notes = append(notes, fmt.Sprintf("%s: installed, but nothing answers at %s yet: start it (the agent keeps looking)", r, url))
			} else {
				notes = append(notes, fmt.Sprintf("%s: nothing answers at %s; the agent uses it once it does", r, url))
			}
		}
	}
	return notes, args, nil
}

// daemonAnswers says whether an Ollama-protocol daemon answers GET / at url.
func daemonAnswers(ctx context.Context, url string) bool {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+"/", nil)
	if err != nil {
		return false
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// checkPorts refuses ports another program holds, and returns the URL the agent will answer at.
func checkPorts(listen, bind string, gossipPort int, noMesh bool) (string, error) {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return "", fmt.Errorf("the API address %s is taken (%v): another agent or program listens there; stop it, or give --listen", listen, err)
	}
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close()
	if !noMesh && gossipPort > 0 {
		g := net.JoinHostPort(bind, strconv.Itoa(gossipPort))
		tl, err := net.Listen("tcp", g)
		if err != nil {
			return "", fmt.Errorf("the gossip port %s/tcp is taken (%v): another agent runs here? stop it, or give --gossip-port", g, err)
		}
		tl.Close()
		ul, err := net.ListenPacket("udp", g)
		if err != nil {
			return "", fmt.Errorf("the gossip port %s/udp is taken (%v): another agent runs here? stop it, or give --gossip-port", g, err)
		}
		ul.Close()
	}
	host := "127.0.0.1"
	if !addr.IP.IsUnspecified() {
		host = addr.IP.String()
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(addr.Port)), nil
}

// waitHealthy polls /healthz until it answers 200.
func waitHealthy(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
		resp, err := hc.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("/healthz: %s", resp.Status)
		}
		last = err
		select {
		case <-ctx.Done():
			return last
		case <-tick.C:
		}
	}
}

// waitPeers waits until the agent's view holds another agent alive, and names them.
func waitPeers(ctx context.Context, c *apiclient.Client, timeout time.Duration) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 3*time.Second)
		v, err := c.Mesh(cctx)
		ccancel()
		if err == nil {
			var peers []string
			for _, m := range v.Members {
				if m.Name != v.Self && m.Role == api.RoleAgent && m.Liveness == api.Alive {
					peers = append(peers, m.Name)
				}
			}
			if len(peers) > 0 {
				return peers, nil
			}
		}
		select {
		case <-ctx.Done():
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return nil, err
			}
			return nil, nil
		case <-tick.C:
		}
	}
}

// writeDoctor prints the agent's own doctor findings (GET /v1/doctor), or why they could not be read.
func writeDoctor(ctx context.Context, w io.Writer, c *apiclient.Client) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	rep, err := c.Doctor(ctx)
	if err != nil {
		fmt.Fprintf(w, "  (the agent's doctor could not be asked: %v; run `llmkube-tui mesh doctor`)\n", err)
		return
	}
	api.Sanitize(&rep) // remote strings, before the terminal
	if len(rep.Findings) == 0 {
		fmt.Fprintln(w, "  no findings: check that the other hosts run and that UDP and TCP 7946 pass between them")
	}
	for _, f := range rep.Findings {
		fmt.Fprintf(w, "  %s: %s\n    fix: %s\n", f.Severity, f.Problem, f.Fix)
	}
}

// leaveFlags are the flags leave needs to find what this join installed, when not the defaults.
func leaveFlags(plan servicePlan) string {
	s := ""
	if plan.mgr.kind == systemdSystem {
		s += " --system"
	}
	if plan.goos != runtime.GOOS {
		s += " --os " + plan.goos
	}
	return s
}
