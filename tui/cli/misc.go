package cli

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/console"
)

func (a *app) doctorCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "doctor",
		Short: "Explain why hosts may be invisible or unusable, with fixes (exit 1 on any error finding)",
		Args:  a.args(cobra.NoArgs),
	}
	c.RunE = a.oneShot(false, bestEffort, func(ctx context.Context, s *session, _ *cobra.Command, _ []string) error {
		d := s.conn.Doctor(ctx)
		agents := len(console.Agents(s.conn.View()))
		if agents == 0 {
			d.Findings = append([]api.Finding{{Severity: api.SeverityError,
				Problem: "no agent of the mesh is visible from this console",
				Fix:     "start llmkube-agent with the same join string, and check the seeds (--join host:port of an agent's gossip port) or --mdns"}}, d.Findings...)
		}
		if d.Findings == nil {
			d.Findings = []api.Finding{}
		}
		if a.g.json {
			if err := a.writeDoc(DoctorDoc{Schema: Schema, Doctor: d}); err != nil {
				return err
			}
		} else if err := doctorText(a.stdout, d, agents); err != nil {
			return err
		}
		n := 0
		for _, f := range d.Findings {
			if f.Severity == api.SeverityError {
				n++
			}
		}
		if n > 0 {
			return fmt.Errorf("the doctor found %d error(s)", n)
		}
		return nil
	})
	return c
}

func (a *app) tokenCmd() *cobra.Command {
	var namespace string
	c := &cobra.Command{
		Use:   "token --namespace NAME",
		Short: "Mint a namespace token from the admin token (the one command that prints a token)",
		Long: `Mint the token of one namespace from the admin token: --token, ` + EnvToken + ` or --token-file when
it is the admin token, else the admin token of the join string. A namespace token sees and
uses only its namespace's placements. Nothing is sent to the mesh.`,
		Args: a.args(cobra.NoArgs),
	}
	c.Flags().StringVar(&namespace, "namespace", "", "the namespace (required)")
	c.RunE = a.run(func(_ *cobra.Command, _ []string) error {
		if namespace == "" {
			return usagef("--namespace is required")
		}
		if err := api.ValidNamespace(namespace); err != nil {
			return &usageError{err}
		}
		cr, err := a.resolveCreds()
		if err != nil {
			return err
		}
		admin := cr.token
		if admin == "" && cr.join != "" {
			j, _ := api.ParseJoin(cr.join) // checked by resolveCreds
			admin = api.AdminToken(j.Secret)
		}
		if admin == "" {
			return usagef("minting needs the admin token: give the join string (%s, --join-string or --join-file) or the admin token (--token, %s or --token-file)", EnvJoin, EnvToken)
		}
		tok, err := api.NamespaceToken(admin, namespace)
		if err != nil {
			return api.Errorf(api.CodeUnauthorized, "%v: minting needs the admin token, not a namespace token", err)
		}
		if a.g.json {
			return a.writeDoc(TokenDoc{Schema: Schema, Namespace: namespace, Token: tok})
		}
		_, err = fmt.Fprintln(a.stdout, tok)
		return err
	})
	return c
}

// What a dynamic completion lists.
const (
	completeHosts = iota
	completeModels
	completePlacements
)

// completionTimeout bounds the mesh look-up behind a Tab press.
const completionTimeout = 2 * time.Second

// complete lists hosts, models or placement ids for shell completion. It asks only an agent
// given with --agent (one quick API call): joining the gossip mesh on every Tab press would be
// slow and show a console coming and going in everyone's events.
func (a *app) complete(kind int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		if len(args) > 0 && kind != completeHosts {
			return nil, none
		}
		c, err := a.resolveCreds()
		if err != nil || c.agent == "" || (c.token == "" && c.join == "") {
			return nil, none
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		conn, err := console.Connect(ctx, console.Options{Join: c.join, Token: c.token, AgentURL: c.agent,
			Timeout: completionTimeout, Log: slog.New(slog.DiscardHandler)})
		if err != nil {
			return nil, none
		}
		defer func() { _ = conn.Close(ctx) }()
		v, err := conn.ScopedView()
		if err != nil {
			return nil, none
		}
		seen := map[string]bool{}
		var out []cobra.Completion
		add := func(s, desc string) {
			if s != "" && !seen[s] && strings.HasPrefix(s, toComplete) {
				seen[s] = true
				out = append(out, cobra.CompletionWithDesc(s, desc))
			}
		}
		switch kind {
		case completeHosts:
			for _, m := range console.Agents(v) {
				add(m.Name, m.Host.OS+"/"+m.Host.Arch+", "+size(m.Host.Memory.Free())+" free")
			}
		case completeModels:
			for _, p := range console.Placements(v) {
				add(p.Model, string(p.State)+" on "+p.Host)
			}
		case completePlacements:
			for _, p := range console.Placements(v) {
				add(p.ID, p.Model+" on "+p.Host)
			}
		}
		sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
		return out, none
	}
}
