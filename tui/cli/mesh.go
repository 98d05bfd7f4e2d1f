package cli

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/console"
)

func (a *app) meshCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "mesh",
		Short: "Every console action as a command, for scripts (tables, or --json)",
		Long: `Every action of the interactive console as a command: data on stdout (a table, or one JSON
document with --json, NDJSON for watch and chat), progress and reasons on stderr.

Exit codes: 0 done, 1 failed, 2 usage, 3 refused by admission, 4 not found,
5 mesh or agent unreachable or timed out, 130 interrupted.`,
		Args: a.args(func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return fmt.Errorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return nil
		}),
		RunE: a.run(func(cmd *cobra.Command, _ []string) error {
			names := make([]string, 0, len(cmd.Commands()))
			for _, s := range cmd.Commands() {
				names = append(names, s.Name())
			}
			return usagef("give a command: %s", strings.Join(names, ", "))
		}),
	}
	c.AddCommand(a.hostsCmd(), a.modelsCmd(), a.rankCmd(), a.placeCmd(), a.deleteCmd(),
		a.chatCmd(), a.runModelCmd(), a.aliasCmd(), a.watchCmd(), a.doctorCmd(), a.tokenCmd())
	return c
}

// oneShot runs a command body that needs the mesh, bounded by --timeout.
func (a *app) oneShot(stream bool, mode settleMode, body func(ctx context.Context, s *session, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return a.run(func(cmd *cobra.Command, args []string) error {
		return a.withSession(cmd, stream, mode, func(ctx context.Context, s *session) error {
			return body(ctx, s, cmd, args)
		})
	})
}

// withSession connects for one command, bounded by --timeout (a stream has no bound unless
// --timeout is given), checks the token against the mesh, and runs body; it leaves the mesh
// after. Every command that acts on the mesh goes through it.
func (a *app) withSession(cmd *cobra.Command, stream bool, mode settleMode, body func(ctx context.Context, s *session) error) error {
	return a.withSessionOn(cmd, stream, mode, nil, body)
}

// withSessionOn is withSession for a command that names hosts (--host): the session waits for
// them to join (connect).
func (a *app) withSessionOn(cmd *cobra.Command, stream bool, mode settleMode, named []string, body func(ctx context.Context, s *session) error) error {
	ctx, cancel := a.commandContext(cmd, stream)
	defer cancel()
	s, err := a.connect(ctx, mode, false, named...)
	if err != nil {
		return err
	}
	defer s.close()
	if _, err := s.conn.ScopedView(); err != nil {
		return err // a token the mesh refuses, found before anything is done with it
	}
	return body(ctx, s)
}

func (a *app) hostsCmd() *cobra.Command {
	var all bool
	c := &cobra.Command{
		Use:   "hosts",
		Short: "List the mesh's hosts: liveness, hardware, engines, memory, models",
		Args:  a.args(cobra.NoArgs),
	}
	c.Flags().BoolVar(&all, "all", false, "list consoles too")
	c.RunE = a.oneShot(false, needAgents, func(ctx context.Context, s *session, _ *cobra.Command, _ []string) error {
		v, err := s.conn.ScopedView()
		if err != nil {
			return err
		}
		hosts := []api.Member{}
		for _, m := range v.Members {
			if m.Role == api.RoleAgent || all {
				hosts = append(hosts, m)
			}
		}
		sort.SliceStable(hosts, func(i, j int) bool { return hosts[i].Name < hosts[j].Name })
		if a.g.json {
			return a.writeDoc(HostsDoc{Schema: Schema, Mesh: v.Mesh, Mode: s.conn.Mode(), Hosts: hosts})
		}
		return hostsTable(a.stdout, hosts, all)
	})
	return c
}

func (a *app) modelsCmd() *cobra.Command {
	var namespace, host string
	c := &cobra.Command{
		Use:     "models",
		Aliases: []string{"placements"},
		Short:   "List the placements: which model runs where, in which state",
		Args:    a.args(cobra.NoArgs),
	}
	c.Flags().StringVar(&namespace, "namespace", "", "only this namespace's placements")
	c.Flags().StringVar(&host, "host", "", "only this host's placements")
	_ = c.RegisterFlagCompletionFunc("host", a.complete(completeHosts))
	c.RunE = a.run(func(cmd *cobra.Command, _ []string) error {
		// The session waits for the host named: none of that name is a typo (exit 4), not an
		// empty list.
		return a.withSessionOn(cmd, false, needAgents, namedHosts(host), func(ctx context.Context, s *session) error {
			return a.listModels(ctx, s, namespace, host)
		})
	})
	return c
}

// listModels is `mesh models`: the placements and intents of namespace and host ("" = all).
func (a *app) listModels(ctx context.Context, s *session, namespace, host string) error {
	v, err := s.conn.ScopedView()
	if err != nil {
		return err
	}
	ps := []api.Placement{}
	for _, p := range console.Placements(v) {
		if (namespace == "" || p.Namespace == namespace) && (host == "" || p.Host == host) {
			ps = append(ps, p)
		}
	}
	// What the mesh keeps running beside what runs: agents without intents (an older
	// version) answer NotFound, and the list stays what it was. Any other failure is said:
	// a list that silently left the intents out would tell a script they are gone.
	var ins []api.IntentStatus
	all, err := s.conn.Intents(ctx)
	if e := (*api.Error)(nil); err != nil && (!errors.As(err, &e) || e.Code != api.CodeNotFound) {
		return err
	}
	for _, in := range all {
		if namespace == "" || in.Namespace == namespace {
			ins = append(ins, in)
		}
	}
	if a.g.json {
		return a.writeDoc(PlacementsDoc{Schema: Schema, Placements: ps, Intents: ins})
	}
	if err := placementsTable(a.stdout, ps); err != nil {
		return err
	}
	return intentsList(a.stdout, ins)
}

// requestFlags are what a placement request is made of, shared by rank and place.
type requestFlags struct {
	runtime, namespace, priority, name string
	sha256                             string
	mmproj                             string // a multimodal projector's source (llama-server)
	args                               []string
	context                            int
	protected, loadAnyway, spread      bool
	replicas                           int      // place: how many hosts the mesh keeps it on
	ttl                                string   // place: idle time before it sleeps
	onlyHosts                          []string // place: the only hosts the mesh may keep it on
	labels                             []string // place: labels its hosts must carry
	maxReplicas                        int      // place: replicas it may scale to under load
	notOnBattery                       bool     // only hosts not running on battery
}

func (r *requestFlags) add(c *cobra.Command, forPlace bool) {
	f := c.Flags()
	f.StringVar(&r.runtime, "runtime", "", "llama-server, ollama or hailo-ollama (default: from the source)")
	f.StringVar(&r.namespace, "namespace", "", "namespace of the placement (default \"default\")")
	f.Var(contextValue{&r.context}, "context", "context size in tokens, e.g. 8192 or 8k (default: the runtime's, 2048)")
	f.StringVar(&r.priority, "priority", "", "batch, low, normal, high or critical (eviction order; default normal)")
	f.BoolVar(&r.spread, "spread", false, "prefer the host with the most room left (default: the tightest fit)")
	f.BoolVar(&r.notOnBattery, "not-on-battery", false, "only hosts not running on battery (a laptop unplugged is refused; a replica already there keeps running)")
	f.StringVar(&r.mmproj, "mmproj", "", "a multimodal projector GGUF (path, https:// or hf://) llama-server runs beside the model, so it reads images; sized and pulled with it")
	if forPlace {
		f.StringVar(&r.name, "name", "", "name the gateway serves the model under (default: from the source)")
		f.BoolVar(&r.protected, "protected", false, "never evict this placement")
		f.BoolVar(&r.loadAnyway, "load-anyway", false, "admit even when the size cannot be known or does not fit (memory check warn)")
		f.StringVar(&r.sha256, "sha256", "", "expected sha256 of a downloaded GGUF file: the download counts only if it matches")
		f.IntVar(&r.replicas, "replicas", 0, fmt.Sprintf("how many hosts the mesh keeps it running on, 1 to %d; a dead host's replica is placed again elsewhere (default: 1, or what it keeps already)", api.MaxReplicas))
		f.IntVar(&r.maxReplicas, "max-replicas", 0, fmt.Sprintf("under load (a replica with over %d requests in flight for 30 s) the mesh adds replicas up to this many, and drops them once idle for the ttl (default: no scaling)", api.BusyInFlight))
		f.StringArrayVar(&r.labels, "label", nil, "a label its hosts must carry, key=value (repeatable; llmkube-agent run --label)")
		f.StringSliceVar(&r.onlyHosts, "only-hosts", nil, "the only hosts the mesh may keep its replicas on, comma-separated (default: any)")
		f.StringVar(&r.ttl, "ttl", "", "idle time before it sleeps (its engine unloaded until the next request), e.g. 10m; -1 never (default: the agent's --idle-ttl)")
		f.StringArrayVar(&r.args, "arg", nil, "an extra engine argument, repeatable (llama-server only, e.g. --arg -ngl --arg 99; the agent allows only its allowlist)")
	}
	_ = c.RegisterFlagCompletionFunc("runtime", cobra.FixedCompletions(
		[]string{string(api.RuntimeLlamaServer), string(api.RuntimeOllama), string(api.RuntimeHailoOllama)}, cobra.ShellCompDirectiveNoFileComp))
	_ = c.RegisterFlagCompletionFunc("priority", cobra.FixedCompletions(
		[]string{"batch", "low", "normal", "high", "critical"}, cobra.ShellCompDirectiveNoFileComp))
}

// contextValue is --context: tokens as api.ParseContext reads them (8192, 8k, 0 for the default).
type contextValue struct{ n *int }

func (v contextValue) String() string {
	if v.n == nil {
		return "0"
	}
	return strconv.Itoa(*v.n)
}

func (v contextValue) Set(s string) error {
	n, err := api.ParseContext(s)
	if err == nil {
		*v.n = n
	}
	return err
}

func (contextValue) Type() string { return "tokens" }

// request checks the flags and builds the request; a bad value is a usage error, found before
// anything reaches the mesh.
func (r *requestFlags) request(source string) (api.PlacementRequest, error) {
	req := api.PlacementRequest{
		Source: strings.TrimSpace(source), Runtime: api.Runtime(r.runtime), Namespace: r.namespace,
		Context: r.context, Priority: api.Priority(r.priority), Name: r.name, Protected: r.protected,
		SHA256: r.sha256, Args: r.args, Replicas: r.replicas, TTL: strings.TrimSpace(r.ttl), Hosts: r.onlyHosts,
		MMProj: strings.TrimSpace(r.mmproj), NotOnBattery: r.notOnBattery,
	}
	if r.replicas < 0 || r.replicas > api.MaxReplicas {
		return req, usagef("--replicas %d: want 1 to %d", r.replicas, api.MaxReplicas)
	}
	labels, err := api.ParseLabels(r.labels)
	if err != nil {
		return req, &usageError{fmt.Errorf("--label: %w", err)}
	}
	req.Labels = labels
	if r.maxReplicas != 0 && (r.maxReplicas < max(r.replicas, 1) || r.maxReplicas > api.MaxReplicas) {
		return req, usagef("--max-replicas %d: want --replicas (%d) to %d", r.maxReplicas, max(r.replicas, 1), api.MaxReplicas)
	}
	req.MaxReplicas = r.maxReplicas
	if req.TTL != "" {
		if _, err := api.ParseTTL(req.TTL); err != nil {
			return req, &usageError{fmt.Errorf("--ttl: %w", err)}
		}
	}
	if req.Source == "" {
		return req, usagef("the source is empty: give file:///abs/x.gguf, https://…/x.gguf, hf://owner/repo/file.gguf, ollama://name:tag or hailo://name:tag")
	}
	if req.Runtime != "" && !req.Runtime.Valid() {
		return req, usagef("--runtime %q: want llama-server, ollama or hailo-ollama", r.runtime)
	}
	if req.Namespace != "" {
		if err := api.ValidNamespace(req.Namespace); err != nil {
			return req, &usageError{fmt.Errorf("--namespace: %w", err)}
		}
	}
	if req.Priority.Level() < 0 {
		return req, usagef("--priority %q: want batch, low, normal, high or critical", r.priority)
	}
	if r.loadAnyway {
		req.MemoryCheck = api.MemoryCheckWarn
	}
	return req, nil
}

func (a *app) rankCmd() *cobra.Command {
	var rf requestFlags
	var sf splitFlags
	c := &cobra.Command{
		Use:   "rank SOURCE",
		Short: "Preview where a model would fit, without placing it (exit 3 when no host fits)",
		Args:  a.args(cobra.ExactArgs(1)),
	}
	rf.add(c, false)
	sf.add(c)
	var req api.PlacementRequest
	// PreRunE: a bad flag is a usage error found before anything reaches the mesh.
	c.PreRunE = func(_ *cobra.Command, args []string) (err error) {
		if err := sf.check(); err != nil {
			return err
		}
		req, err = rf.request(args[0])
		return err
	}
	c.RunE = a.oneShot(false, needAgents, func(ctx context.Context, s *session, _ *cobra.Command, _ []string) error {
		if sf.split {
			return a.rankSplit(ctx, s.conn, req, sf)
		}
		r, err := s.conn.Rank(ctx, req, rf.spread)
		if err != nil {
			return err
		}
		refusal := r.Refusal()
		a.suggestSplit(s.conn, req, r, refusal)
		if a.g.json {
			if err := a.writeDoc(RankingDoc{Schema: Schema, Ranking: r, Error: a.errorOf(refusal)}); err != nil {
				return err
			}
		} else if err := rankingTable(a.stdout, r); err != nil {
			return err
		}
		return refusal
	})
	return c
}

// namedHosts are the hosts a command's flags name (--host, a split's --hosts), for its session
// to wait for; an empty --host names none.
func namedHosts(host string, more ...string) []string {
	if host == "" {
		return more
	}
	return append([]string{host}, more...)
}

// hasAgent says whether the view holds an agent named host, whatever its liveness, as one a
// command can call (console.Conn.Client: its metadata read).
func hasAgent(v api.MeshView, host string) bool {
	for _, m := range v.Members {
		if m.Name == host && m.Role == api.RoleAgent && m.Host != nil {
			return true
		}
	}
	return false
}
