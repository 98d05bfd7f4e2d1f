package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/console"
)

func (a *app) placeCmd() *cobra.Command {
	var (
		rf         requestFlags
		sf         splitFlags
		host       string
		auto, wait bool
	)
	c := &cobra.Command{
		Use:   "place SOURCE [--host H | --auto]",
		Short: "Run a model on a host: the agent sizes it, admits it, pulls and loads it",
		Long: `Run a model on a host. The host's agent makes the decision: it sizes the source before
pulling anything and refuses (exit 3) what cannot fit or run there.

--host H places on H; --auto places on the best host of the ranking (see 'mesh rank').
--split runs one GGUF model across the fewest hosts that hold it (llama.cpp RPC over the
sealed channel; --hosts a,b,c chooses them, --host the main); see 'mesh rank --split'.
With neither, the one host that fits is used; when several fit, choose (exit 2).
--wait follows the placement (progress on stderr) until it is ready (exit 0) or failed
(exit 3 for an admission refusal, 1 otherwise); without it the placement prints at once.
Placing what the mesh already runs (the same source and settings) places nothing new: it says
so, follows that placement with --wait, and exits 0 — a script may run it twice.`,
		Args: a.args(cobra.ExactArgs(1)),
	}
	rf.add(c, true)
	sf.add(c)
	f := c.Flags()
	f.StringVar(&host, "host", "", "the host to place on")
	f.BoolVar(&auto, "auto", false, "place on the best host of the ranking")
	f.BoolVar(&wait, "wait", false, "wait until the model is ready or failed, progress on stderr")
	_ = c.RegisterFlagCompletionFunc("host", a.complete(completeHosts))
	var req api.PlacementRequest
	// PreRunE: a bad flag is a usage error found before anything reaches the mesh.
	c.PreRunE = func(_ *cobra.Command, args []string) (err error) {
		if host != "" && auto {
			return usagef("give --host or --auto, not both")
		}
		if err := sf.check(); err != nil {
			return err
		}
		if req, err = rf.request(args[0]); err != nil {
			return err
		}
		if host != "" && len(req.Hosts) > 0 && !slices.Contains(req.Hosts, host) {
			return usagef("--host %s is not one of --only-hosts %s", host, strings.Join(req.Hosts, ","))
		}
		return nil
	}
	c.RunE = a.run(func(cmd *cobra.Command, _ []string) error {
		return a.withSessionOn(cmd, wait, needAgents, namedHosts(host, sf.hosts...), func(ctx context.Context, s *session) error {
			p, err := a.placeOnce(ctx, s.conn, req, host, placeChoice{auto: auto, spread: rf.spread, split: sf})
			if err != nil {
				return err
			}
			if wait {
				p, err = a.follow(ctx, s.conn, p)
			}
			if a.g.json {
				if werr := a.writeDoc(PlacementDoc{Schema: Schema, Placement: &p, Error: a.errorOf(err)}); werr != nil {
					return werr
				}
			} else if werr := placementsTable(a.stdout, []api.Placement{p}); werr != nil {
				return werr
			}
			return err
		})
	})
	return c
}

// placeChoice is how `mesh place` picks a host when --host does not name one.
type placeChoice struct {
	auto, spread bool
	split        splitFlags
}

// placeOnce places req on host (or the host how picks), and says on stderr what it did. Placing
// what already runs is placing once, so that a script may run it twice: that placement is
// returned, and nothing new is placed.
func (a *app) placeOnce(ctx context.Context, conn *console.Conn, req api.PlacementRequest, host string, how placeChoice) (api.Placement, error) {
	p, existed := conn.Existing(ctx, req, host)
	if !existed {
		var err error
		if host, err = a.pickHost(ctx, conn, &req, host, how); err != nil {
			return p, err
		}
		if req.MemoryCheck == api.MemoryCheckWarn {
			fmt.Fprintf(a.stderr, "warning: --load-anyway: %s admits it even if its size cannot be known or it does not fit\n", host)
		}
		if p, existed, err = conn.PlaceOnce(ctx, host, req); err != nil {
			return p, err
		}
	}
	if existed {
		fmt.Fprintf(a.stderr, "already placed: %s on %s as %s (%s), nothing new placed\n", p.Model, p.Host, p.ID, p.State)
	} else {
		fmt.Fprintf(a.stderr, "placed %s on %s as %s (%s)\n", p.Model, p.Host, p.ID, p.State)
	}
	return p, nil
}

// pickHost is the host to place req on: host when given (a split's main host), or the one
// chooseHost picks. A split plans its hosts into req.
func (a *app) pickHost(ctx context.Context, conn *console.Conn, req *api.PlacementRequest, host string, how placeChoice) (string, error) {
	var err error
	if how.split.split {
		if host, err = a.splitMain(ctx, conn, req, how.split, host); err != nil {
			return "", err
		}
	}
	if host == "" {
		return a.chooseHost(ctx, conn, *req, how.spread, how.auto)
	}
	return host, nil
}

// follow waits for p to be ready or failed, its progress on stderr, and returns it as it ended
// (as it was last seen, when the wait itself ended).
func (a *app) follow(ctx context.Context, conn *console.Conn, p api.Placement) (api.Placement, error) {
	pr := progress{w: a, state: p.State, started: true} // the line placeOnce wrote said the first state
	final, err := conn.Wait(ctx, p, func(pl api.Placement, err error) error {
		if err == nil {
			pr.show(pl)
		}
		return err // a look that fails ends a script's wait: nobody is there to give up
	})
	if final.ID != "" {
		p = final
	}
	if err != nil && ctx.Err() != nil {
		fmt.Fprintf(a.stderr, "stopped waiting: %s continues on %s; `llmkube-tui mesh delete %s` stops it\n", p.ID, p.Host, p.ID)
	}
	return p, err
}

// chooseHost picks the host when --host is not given: the best of the ranking with --auto;
// without it, the one host that fits, or a usage error naming the candidates when several do.
// No host fitting is the refusal Place itself would give.
func (a *app) chooseHost(ctx context.Context, conn *console.Conn, req api.PlacementRequest, spread, auto bool) (string, error) {
	r, err := conn.Rank(ctx, req, spread)
	if err != nil {
		return "", err
	}
	if err := r.Refusal(); err != nil {
		return "", err
	}
	var fits []string
	var best api.Ranked
	for _, h := range r.Hosts {
		if h.Verdict != api.VerdictRefused && (len(req.Hosts) == 0 || slices.Contains(req.Hosts, h.Host)) {
			if len(fits) == 0 {
				best = h // the ranking is best first
			}
			fits = append(fits, h.Host)
		}
	}
	if len(fits) == 0 {
		return "", api.Errorf(api.CodeInsufficientMemory, "none of --only-hosts %s fits (mesh rank says why)", strings.Join(req.Hosts, ","))
	}
	switch {
	case auto:
		fmt.Fprintf(a.stderr, "best host: %s (%s)\n", best.Host, best.Reason)
	case len(fits) > 1:
		return "", usagef("%d hosts fit (%s): choose one with --host, or let --auto pick %s", len(fits), strings.Join(fits, ", "), best.Host)
	default:
		fmt.Fprintf(a.stderr, "the one host that fits: %s (%s)\n", best.Host, best.Reason)
	}
	return best.Host, nil
}

// progress prints a placement's progress on stderr: each state once, and what it moves (a
// pull, a split's weights to its members: api.Placement.Moving) in steps of 10%, so a log of it
// stays short.
type progress struct {
	w       *app
	state   api.PlacementState
	decile  int
	started bool
}

func (p *progress) show(pl api.Placement) {
	d := int(pl.Progress * 10)
	if p.started && pl.State == p.state && (pl.Moving() == "" || d <= p.decile) {
		return
	}
	p.started, p.state, p.decile = true, pl.State, d
	line := pl.Host + ": " + stateText(pl)
	if m := pl.Moving(); m != "" && pl.TotalBytes > 0 {
		line += fmt.Sprintf(" (%s of %s %s)", size(pl.PulledBytes), size(pl.TotalBytes), m)
	}
	if pl.Reason != "" && (pl.State.Terminal() || pl.State == api.StateRestarting) {
		line += ": " + pl.Reason
	}
	fmt.Fprintln(p.w.stderr, line)
}

func (a *app) deleteCmd() *cobra.Command {
	c := &cobra.Command{
		Use:               "delete ID",
		Aliases:           []string{"rm"},
		Short:             "Stop and remove a placement (by id, unique id prefix, or a model served once)",
		Args:              a.args(cobra.ExactArgs(1)),
		ValidArgsFunction: a.complete(completePlacements),
	}
	c.RunE = a.oneShot(false, needAgents, func(ctx context.Context, s *session, _ *cobra.Command, args []string) error {
		p, err := s.conn.Delete(ctx, args[0])
		if err != nil {
			var ae *api.Error
			if errors.As(err, &ae) && ae.Code == api.CodeBadRequest {
				return &usageError{err} // an ambiguous reference: name one placement
			}
			return err
		}
		if a.g.json {
			return a.writeDoc(DeletedDoc{Schema: Schema, Deleted: p})
		}
		_, err = fmt.Fprintf(a.stdout, "deleted %s (%s on %s)\n", p.ID, p.Model, p.Host)
		return err
	})
	return c
}
