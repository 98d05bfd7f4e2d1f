// Package cli is the command tree of `llmkube-tui`: the interactive console at the root and
// `llmkube-tui mesh …`, the headless twin of every console action, for scripts, cron jobs and
// CI. Every command goes through tui/console, the action layer the interactive console uses,
// so the two never drift apart.
//
// Output contract (the README's Scripting section documents it): data on stdout — an aligned table, or with
// --json one JSON document (NDJSON for streams) carrying "schema": "llmkube/v1"; progress, logs
// and error reasons on stderr; the exit codes in exit.go. Secrets are never printed: the join
// string and tokens are redacted from stderr and logs, and only `mesh token` prints a token,
// because that is what it is for.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/version"
)

// Options are what main provides: the parts of the program that live outside this package.
type Options struct {
	// RunConsole runs the interactive console on a live connection until ctx ends or the user
	// quits. log goes to --log-file or nowhere: never to the terminal the console draws on.
	// nil: this build has no interactive console.
	RunConsole func(ctx context.Context, conn *console.Conn, log *slog.Logger) error
	// Demo starts a local demo mesh of simulated hosts and returns its join string and a stop
	// func. nil: this build has no demo.
	Demo func(ctx context.Context) (join string, stop func(), err error)
	// Getenv reads the environment (os.Getenv when nil); tests pass their own.
	Getenv func(string) string
}

// Timeouts.
const (
	// DefaultTimeout bounds a one-shot command (hosts, models, rank, place, delete, doctor).
	// Streams — watch, chat, place --wait — run without a limit unless --timeout is given.
	DefaultTimeout = 30 * time.Second
	// defaultCallTimeout bounds each API call and the wait for the first agent; --timeout lowers it.
	defaultCallTimeout = 10 * time.Second
	// doctorSettle is how long the doctor waits for agents before reporting what it sees.
	doctorSettle = 3 * time.Second
	// closeTimeout bounds leaving the mesh at the end of a command.
	closeTimeout = 5 * time.Second
)

// globals are the root's persistent flags.
type globals struct {
	joinString, joinFile string
	token, tokenFile     string
	agent                string
	caFile               string
	insecureHTTP         bool
	seeds                []string
	mdns                 bool
	mdnsInterface        string
	bind                 string
	nodeName             string
	profile              string
	timeout              time.Duration
	json                 bool
	verbose              bool
	logFile              string
	logJSON              bool
	demo                 bool
}

// app is one run of the command tree.
type app struct {
	opts   Options
	g      globals
	root   *cobra.Command
	red    *redactor
	stdin  io.Reader
	stdout io.Writer
	stderr *safeWriter

	started    bool // a command's own code ran: errors before it are usage errors (cobra's)
	docWritten bool // the one JSON document is out, with its error if any
}

func newApp(opts Options) *app {
	if opts.Getenv == nil {
		opts.Getenv = os.Getenv
	}
	a := &app{opts: opts, red: &redactor{}, stdin: os.Stdin, stdout: os.Stdout}
	a.stderr = newSafeWriter(a.red, os.Stderr)
	a.root = a.rootCmd()
	return a
}

func (a *app) getenv(k string) string { return a.opts.Getenv(k) }

// Run runs the command line args (without the program name) and returns the exit code.
// ctx should end on SIGINT/SIGTERM: that cancels what runs (a chat's generation upstream) and
// exits 130.
func Run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer, opts Options) int {
	a := newApp(opts)
	if args == nil {
		args = []string{} // nil makes cobra read os.Args
	}
	a.stdin, a.stdout, a.stderr = stdin, stdout, newSafeWriter(a.red, stderr)
	defer a.stderr.close()
	a.root.SetArgs(args)
	a.root.SetIn(stdin)
	a.root.SetOut(stdout)
	a.root.SetErr(a.stderr)
	a.completionCmd(a.root)
	cmd, err := a.root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if !a.started {
		err = &usageError{err}
	}
	f := classify(err, ctx.Err() != nil)
	a.report(cmd, f)
	return f.exit
}

// report says why a command failed: the reason on stderr, and with --json the error document
// (or NDJSON line) on stdout unless the command's own document already carries it.
func (a *app) report(cmd *cobra.Command, f failure) {
	msg := a.red.string(f.err.Message)
	if f.exit == ExitUsage {
		fmt.Fprintf(a.stderr, "%s: %s\n", cmd.CommandPath(), msg)
		fmt.Fprintf(a.stderr, "Run '%s --help' for usage.\n", cmd.CommandPath())
	} else {
		prefix := ""
		if f.err.Code != CodeFailed && f.err.Code != CodeInterrupted && f.err.Code != CodeTimeout {
			prefix = string(f.err.Code) + ": "
		}
		if f.err.Code == CodeTimeout {
			prefix = "timed out: "
		}
		fmt.Fprintf(a.stderr, "%s: %s%s\n", cmd.CommandPath(), prefix, msg)
		if f.err.Fix != "" {
			fmt.Fprintf(a.stderr, "  fix: %s\n", a.red.string(f.err.Fix))
		}
	}
	if a.g.json && !a.docWritten {
		_ = a.writeCompact(ErrorDoc{Schema: Schema, Error: a.jsonError(f)})
	}
}

func (a *app) rootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:   "llmkube-tui",
		Short: "The llmkube mesh console: hosts, placements, chat and events, interactive or headless",
		Long: `llmkube-tui joins an llmkube mesh as a console. Without a command it runs the interactive
console; 'llmkube-tui mesh <command>' does every console action headless, for scripts.

It reaches the mesh with a join string (--join-string, ` + EnvJoin + ` or --join-file; made by
'llmkube-agent init'), joining the gossip mesh as a console member, or through one agent's API
with --agent URL and a token (--token, ` + EnvToken + ` or --token-file). Secrets are never echoed.`,
		Args:          a.args(cobra.NoArgs),
		SilenceErrors: true,
		SilenceUsage:  true,
		Version:       version.Get().String(),
		RunE:          a.run(a.interactive),
	}
	// --version and `version` print the same line.
	root.SetVersionTemplate("llmkube-tui {{.Version}}\n")
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  a.args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "llmkube-tui %s\n", version.Get())
			return err
		},
	})
	f := root.PersistentFlags()
	f.StringVar(&a.g.joinString, "join-string", "", "the mesh's join string (prefer "+EnvJoin+" or --join-file: flags show in ps)")
	f.StringVar(&a.g.joinFile, "join-file", "", "read the join string from this file")
	f.StringVar(&a.g.token, "token", "", "API token, admin or namespace (prefer "+EnvToken+" or --token-file); default: the admin token of the join string")
	f.StringVar(&a.g.tokenFile, "token-file", "", "read the API token from this file")
	f.StringVar(&a.g.agent, "agent", "", "act through this agent's API (URL or host:port) instead of joining the mesh (env "+EnvAgent+"); across the network https://, which agents serve with the mesh's CA")
	f.StringVar(&a.g.caFile, "ca-file", "", "the mesh's CA certificate (llmkube-agent ca), to reach an agent over https:// with a token and no join string")
	f.BoolVar(&a.g.insecureHTTP, "insecure-http", false, "allow --agent http:// to a host other than this one (an agent run with --lan-http): tokens and chats cross the network readable")
	f.StringSliceVar(&a.g.seeds, "join", nil, "gossip host:port of an agent to join (repeat or comma-separate; adds to the join string's seeds)")
	f.BoolVar(&a.g.mdns, "mdns", false, "find mesh members with mDNS on the LAN")
	f.StringVar(&a.g.mdnsInterface, "mdns-interface", "", "network interface for mDNS (default: every multicast-capable one)")
	f.StringVar(&a.g.bind, "bind", "", "gossip address this console listens on, so agents reach it (default: loopback when every seed is on loopback, else every interface)")
	f.StringVar(&a.g.nodeName, "node-name", "", "this console's name in the mesh (default: host name and a random suffix)")
	f.StringVar(&a.g.profile, "mesh-profile", "", "gossip timings: lan, wan or local (env "+EnvProfile+"; default lan)")
	f.DurationVar(&a.g.timeout, "timeout", DefaultTimeout, "how long a command may take, 0 = no limit (watch, chat and place --wait have none unless given)")
	f.BoolVar(&a.g.json, "json", false, "print JSON (one document; NDJSON for watch and chat) with a stable schema")
	f.BoolVarP(&a.g.verbose, "verbose", "v", false, "log what happens to stderr (headless commands are quiet without it), or to --log-file")
	f.StringVar(&a.g.logFile, "log-file", "", "append logs to this file (the interactive console logs only there)")
	f.BoolVar(&a.g.logJSON, "log-json", false, "write logs as JSON lines")
	if a.opts.Demo != nil {
		// llmkube-demo sets it itself: its help need not offer it.
		f.BoolVar(&a.g.demo, "demo", false, "start a local demo mesh of simulated hosts and use it")
		_ = f.MarkHidden("demo")
	} else {
		// Only a build with a demo offers it: llmkube-tui refuses --demo as the unknown flag
		// it is there (a usage error, exit 2) and says which program starts one.
		root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
			if strings.Contains(err.Error(), "--demo") {
				return fmt.Errorf("%w: the demo mesh is its own program, llmkube-demo (make demo)", err)
			}
			return err
		})
	}
	root.AddCommand(a.meshCmd())
	return root
}

// completionCmd takes cobra's completion command (bash, zsh, fish, powershell) and makes a
// missing or unknown shell a usage error rather than help with exit 0. Call it once stdout is
// set: cobra's shell commands keep the writer they find when they are made.
func (a *app) completionCmd(root *cobra.Command) {
	root.InitDefaultCompletionCmd()
	c, _, err := root.Find([]string{"completion"})
	if err != nil || c == root {
		return
	}
	c.Args = a.args(func(_ *cobra.Command, args []string) error {
		if len(args) > 0 {
			return fmt.Errorf("unknown shell %q: want bash, zsh, fish or powershell", args[0])
		}
		return nil
	})
	c.RunE = a.run(func(*cobra.Command, []string) error {
		return usagef("give a shell: bash, zsh, fish or powershell")
	})
}

// args wraps a cobra argument check so its complaint is a usage error that shows the usage line.
func (a *app) args(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usagef("%v (usage: %s)", err, cmd.UseLine())
		}
		return nil
	}
}

// run wraps a command's body: from here on errors are the command's, not cobra's.
func (a *app) run(body func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		a.started = true
		a.stdin = cmd.InOrStdin()
		a.stdout = cmd.OutOrStdout()
		if w, ok := cmd.ErrOrStderr().(*safeWriter); !ok || w != a.stderr {
			a.stderr = newSafeWriter(a.red, cmd.ErrOrStderr())
		}
		return body(cmd, args)
	}
}

// commandContext bounds a command by --timeout. Streams have no default limit.
func (a *app) commandContext(cmd *cobra.Command, stream bool) (context.Context, context.CancelFunc) {
	ctx := cmd.Context()
	d := a.g.timeout
	if !cmd.Flags().Changed("timeout") && stream {
		d = 0
	}
	if d <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// callTimeout bounds each API call: 10 s, or less when --timeout is less.
func (a *app) callTimeout() time.Duration {
	if a.g.timeout > 0 && a.g.timeout < defaultCallTimeout {
		return a.g.timeout
	}
	return defaultCallTimeout
}

// logger builds the log for a command: to --log-file when given (info, or debug with
// --verbose); else, for headless commands, to stderr with --verbose and nowhere without it —
// what a script must know comes back as the command's error, and the mesh's own complaints
// (memberlist's, a departing console's) would only be noise in its stderr. The interactive
// console never logs to the terminal it draws on.
func (a *app) logger(interactive bool) (*slog.Logger, func(), error) {
	level := slog.LevelDebug
	var w io.Writer
	closeFn := func() {}
	switch {
	case a.g.logFile != "":
		f, err := os.OpenFile(a.g.logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, nil, &usageError{fmt.Errorf("--log-file: %w", err)}
		}
		if !a.g.verbose {
			level = slog.LevelInfo
		}
		sw := newSafeWriter(a.red, f)
		w, closeFn = sw, func() {
			sw.close()
			_ = f.Close()
		}
	case interactive || !a.g.verbose:
		return slog.New(slog.DiscardHandler), closeFn, nil
	default:
		w = a.stderr
	}
	hopts := &slog.HandlerOptions{Level: level}
	if a.g.logJSON {
		return slog.New(slog.NewJSONHandler(w, hopts)), closeFn, nil
	}
	return slog.New(slog.NewTextHandler(w, hopts)), closeFn, nil
}

// settleMode says how long a command waits for the mesh's picture in member mode.
type settleMode int

const (
	needAgents settleMode = iota // wait for an agent; none within the call timeout is exit 5
	bestEffort                   // wait a little, then report what is seen (the doctor)
	noSettle                     // take the view as it comes (the interactive console)
)

// session is a command's connection to the mesh.
type session struct {
	conn  *console.Conn
	log   *slog.Logger
	close func()
}

// connect reaches the mesh as the flags say and, joined as a member, waits until the view
// holds the agents' state, so a command acts on the mesh as it is rather than on a half-joined
// picture. named are hosts the command names (--host): in either mode it waits for them to be
// in the view too, within the same bound — a host that is starting, or that a console just
// joined has not heard of yet, is not a NotFound.
func (a *app) connect(ctx context.Context, mode settleMode, interactive bool, named ...string) (*session, error) {
	c, err := a.resolveCreds()
	if err != nil {
		return nil, err
	}
	log, closeLog, err := a.logger(interactive)
	if err != nil {
		return nil, err
	}
	var stopDemo func()
	cleanup := func() {
		if stopDemo != nil {
			stopDemo()
		}
		closeLog()
	}
	if a.g.demo {
		join, stop, err := a.opts.Demo(ctx)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("starting the demo mesh: %w", err)
		}
		a.red.add(join, joinSecretText(join))
		// A new mesh: no token or agent given for another one can work with it.
		c.join, c.token, c.agent, stopDemo = join, "", "", stop
	}
	opts, err := a.consoleOptions(c, log)
	if err != nil {
		cleanup()
		return nil, err
	}
	conn, err := console.Connect(ctx, opts)
	if err != nil {
		cleanup()
		return nil, err
	}
	s := &session{conn: conn, log: log, close: func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), closeTimeout)
		defer cancel()
		if err := conn.Close(cctx); err != nil {
			log.Debug("leaving the mesh", "err", err)
		}
		cleanup()
	}}
	if mode != noSettle && (conn.Mode() == console.ModeMember || len(named) > 0) {
		wait := a.callTimeout()
		if mode == bestEffort {
			// Leave the doctor half of what remains to examine what it saw.
			wait = min(wait, doctorSettle)
			if dl, ok := ctx.Deadline(); ok {
				wait = min(wait, time.Until(dl)/2)
			}
		}
		if err := settle(ctx, conn, wait, mode == needAgents, named); err != nil {
			s.close()
			return nil, err
		}
	}
	return s, nil
}

// consoleOptions turns flags and secrets into the action layer's options.
func (a *app) consoleOptions(c creds, log *slog.Logger) (console.Options, error) {
	profile := a.g.profile
	if profile == "" {
		profile = a.getenv(EnvProfile)
	}
	if profile == "" && a.g.demo {
		profile = mesh.ProfileLocal // the demo's agents run on this machine with local timings
	}
	switch profile {
	case "", mesh.ProfileLAN, mesh.ProfileWAN, mesh.ProfileLocal:
	default:
		return console.Options{}, usagef("--mesh-profile %q: want lan, wan or local", profile)
	}
	o := console.Options{
		Join: c.join, Token: c.token, AgentURL: c.agent, CAFile: a.g.caFile, InsecureHTTP: a.g.insecureHTTP, Seeds: a.g.seeds,
		MDNS: a.g.mdns, MDNSInterface: a.g.mdnsInterface, NodeName: a.g.nodeName, Bind: a.g.bind,
		Profile: profile, Timeout: a.callTimeout(), Log: log,
	}
	switch {
	case o.AgentURL != "":
		if len(o.Seeds) > 0 || o.MDNS {
			return o, usagef("--join and --mdns find gossip peers; they do not go with --agent, which joins nothing")
		}
		if o.Token == "" && o.Join == "" {
			return o, usagef("--agent needs a token: --token, %s or --token-file (or a join string to derive the admin token from)", EnvToken)
		}
	case o.Join != "":
		j, _ := api.ParseJoin(o.Join) // checked by resolveCreds
		if len(j.Seeds) == 0 && len(o.Seeds) == 0 && !o.MDNS {
			return o, usagef("nothing to join: the join string names no seeds; add --join host:port of an agent's gossip address, --mdns, or use --agent URL")
		}
	default:
		return o, &usageError{errNoCreds}
	}
	return o, nil
}

// settle waits until, as a member, every alive agent's state document has arrived (its host
// shows when it started, which node metadata alone does not carry), and every named host is in
// the view, or wait passes. needAgent: no agent at all by then means the mesh is unreachable;
// a named host still missing then is NotFound.
func settle(ctx context.Context, conn *console.Conn, wait time.Duration, needAgent bool, named []string) error {
	changed, stop := conn.Subscribe()
	defer stop()
	start := time.Now()
	t := time.NewTimer(wait)
	defer t.Stop()
	member := conn.Mode() == console.ModeMember
	for {
		v := conn.View()
		agents := console.Agents(v)
		i := slices.IndexFunc(named, func(h string) bool { return !hasAgent(v, h) })
		if (!member || settled(agents)) && i < 0 {
			return nil
		}
		timedOut := false
		select {
		case <-ctx.Done():
			if !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return ctx.Err()
			}
			timedOut = true
		case <-t.C:
			timedOut = true
		case <-changed:
		}
		switch {
		case !timedOut:
		case needAgent && len(agents) == 0:
			return noAgent(v.Mesh, wait)
		case i >= 0:
			return api.Errorf(api.CodeNotFound, "no agent %q in mesh %q: none of that name joined within %s (`mesh hosts` lists them)",
				named[i], v.Mesh, time.Since(start).Round(100*time.Millisecond))
		case ctx.Err() != nil:
			return ctx.Err()
		default:
			return nil
		}
	}
}

func noAgent(meshID string, wait time.Duration) error {
	return &errUnreachable{
		msg: fmt.Sprintf("no agent of mesh %q answered within %s", meshID, wait),
		fix: "check the join string's seeds (or --join host:port) point at a running llmkube-agent's gossip port, or run `llmkube-tui mesh doctor`",
	}
}

func settled(agents []api.Member) bool {
	if len(agents) == 0 {
		return false
	}
	for _, m := range agents {
		if m.Host.StartedAt.IsZero() {
			return false
		}
	}
	return true
}

// interactive is the root without a command: the console.
func (a *app) interactive(cmd *cobra.Command, _ []string) error {
	if a.opts.RunConsole == nil {
		return errors.New("the interactive console is not in this build: use `llmkube-tui mesh <command>` (see --help)")
	}
	ctx := cmd.Context()
	s, err := a.connect(ctx, noSettle, true)
	if err != nil {
		return err
	}
	defer s.close()
	return a.opts.RunConsole(ctx, s.conn, s.log)
}
