package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/console"
)

// splitFlags are `mesh rank --split` and `mesh place --split [--hosts a,b,c]`: one model across
// several hosts over llama.cpp RPC.
type splitFlags struct {
	split  bool
	hosts  []string
	maxRTT time.Duration
}

func (s *splitFlags) add(c *cobra.Command) {
	f := c.Flags()
	f.BoolVar(&s.split, "split", false, "split the model across several hosts (llama.cpp RPC over the sealed channel)")
	f.StringSliceVar(&s.hosts, "hosts", nil, "with --split: the hosts to use, comma-separated (default: the fewest that fit)")
	f.DurationVar(&s.maxRTT, "max-rtt", 0, fmt.Sprintf("with --split: leave out hosts whose round trip is over this, up to %v (default %v)",
		api.MaxSplitRTTMillis*time.Millisecond, api.DefaultSplitRTTMillis*time.Millisecond))
	_ = c.RegisterFlagCompletionFunc("hosts", func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
		return nil, cobra.ShellCompDirectiveNoFileComp
	})
}

// check refuses --hosts without --split.
func (s *splitFlags) check() error {
	if len(s.hosts) > 0 && !s.split {
		return usagef("--hosts chooses the members of a split: give --split too")
	}
	if s.maxRTT != 0 && !s.split {
		return usagef("--max-rtt bounds the members of a split: give --split too")
	}
	if s.maxRTT < 0 || s.maxRTT > api.MaxSplitRTTMillis*time.Millisecond {
		return usagef("--max-rtt %s: want a duration up to %v (the default is %v)", s.maxRTT,
			api.MaxSplitRTTMillis*time.Millisecond, api.DefaultSplitRTTMillis*time.Millisecond)
	}
	return nil
}

// ask is the split the flags ask for.
func (s splitFlags) ask() *api.SplitAsk {
	return &api.SplitAsk{Hosts: s.hosts, MaxRTTMillis: float64(s.maxRTT) / float64(time.Millisecond)}
}

// SplitDoc is `mesh rank --split --json`; Error is set (exit 3) when the hosts do not hold it.
type SplitDoc struct {
	Schema   string           `json:"schema"`
	Estimate api.SizeEstimate `json:"estimate"`
	SizedBy  string           `json:"sized_by"`
	Plan     api.SplitPlan    `json:"plan"`
	Error    *JSONError       `json:"error,omitempty"`
}

// planSplit sizes req through an agent and plans it over the console's view, with main as the
// main host when given.
func (a *app) planSplit(ctx context.Context, conn *console.Conn, req api.PlacementRequest, sf splitFlags, main string) (console.Ranking, api.SplitPlan, error) {
	r, err := conn.Rank(ctx, req, false)
	if err != nil {
		return r, api.SplitPlan{}, err
	}
	req.Split = sf.ask()
	plan := r.Split(conn.View().Members, req, sf.hosts, main)
	if !plan.Fits {
		return r, plan, &api.Error{Code: api.CodeInsufficientMemory, Message: plan.Reason}
	}
	return r, plan, nil
}

// rankSplit is `mesh rank --split`.
func (a *app) rankSplit(ctx context.Context, conn *console.Conn, req api.PlacementRequest, sf splitFlags) error {
	r, plan, refusal := a.planSplit(ctx, conn, req, sf, "")
	if r.SizedBy == "" && refusal != nil {
		return refusal
	}
	if a.g.json {
		if err := a.writeDoc(SplitDoc{Schema: Schema, Estimate: r.Estimate, SizedBy: r.SizedBy, Plan: plan, Error: a.errorOf(refusal)}); err != nil {
			return err
		}
	} else if err := splitTable(a.stdout, plan); err != nil {
		return err
	}
	return refusal
}

// splitMain plans a split for `mesh place --split` and returns its main host (host, when
// given), with req asking the main for the split.
func (a *app) splitMain(ctx context.Context, conn *console.Conn, req *api.PlacementRequest, sf splitFlags, host string) (string, error) {
	_, plan, err := a.planSplit(ctx, conn, *req, sf, host)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(a.stderr, "split: %s\n", plan.Reason)
	req.Split = sf.ask()
	return plan.Main, nil
}

// splitTable prints a plan: one row per member, then the hosts left out.
func splitTable(w io.Writer, p api.SplitPlan) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tROLE\tLAYERS\tSHARE\tWEIGHTS\tKV\tCOMPUTE\tNEED\tFREE")
	for _, m := range p.Members {
		role := "worker"
		if m.Main {
			role = "main"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%.2f\t%s\t%s\t%s\t%s\t%s\n", api.Printable(m.Host), role, m.Layers, p.Layers, m.Share,
			api.FormatBytes(m.Weights), api.FormatBytes(m.KV), api.FormatBytes(m.Compute), api.FormatBytes(m.Reserves()), api.FormatBytes(m.Free))
	}
	for _, l := range p.Left {
		fmt.Fprintf(tw, "%s\tleft out\t\t\t\t\t\t\t%s\n", api.Printable(l.Host), api.Printable(l.Reason))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	speed := "unknown"
	if p.TokensPerS > 0 {
		speed = fmt.Sprintf("%.1f tok/s", p.TokensPerS)
	}
	_, err := fmt.Fprintf(w, "%s\nexpected speed: %s (%s)\n", api.Printable(p.Reason), speed, api.Printable(strings.TrimSpace(p.Basis)))
	return err
}

// suggestSplit says on stderr when no host holds a GGUF model alone but several do together,
// and how to place it so: the preview offers a split whenever no single host fits.
func (a *app) suggestSplit(conn *console.Conn, req api.PlacementRequest, r console.Ranking, refusal error) {
	if refusal == nil || r.Estimate.Layers <= 0 {
		return
	}
	plan := r.Split(conn.View().Members, req, nil, "")
	if !plan.Fits {
		return
	}
	hosts := make([]string, len(plan.Members))
	for i, m := range plan.Members {
		hosts[i] = m.Host
	}
	fmt.Fprintf(a.stderr, "no host holds it alone, but %d do together (%s): llmkube-tui mesh rank %s --split, then mesh place … --split\n",
		len(hosts), api.Printable(strings.Join(hosts, ", ")), api.Printable(req.Source))
}
