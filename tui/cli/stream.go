package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/console"
)

// maxPrompt bounds a prompt read from stdin.
const maxPrompt = 8 << 20

func (a *app) chatCmd() *cobra.Command {
	var (
		system      string
		seed        int
		maxTokens   int
		temperature float64
	)
	c := &cobra.Command{
		Use:   "chat MODEL [PROMPT | -]",
		Short: "Ask a model of the mesh; the answer streams to stdout as it is generated",
		Long: `Ask a model served anywhere in the mesh. The answer streams to stdout token by token; with
--json each piece is an NDJSON line and the last line says who answered and the token usage.
The prompt is the argument, or stdin with '-' (or when no prompt is given and stdin is not a
terminal). Ctrl-C stops the generation on the host that runs it.`,
		Args:              a.args(cobra.RangeArgs(1, 2)),
		ValidArgsFunction: a.complete(completeModels),
	}
	f := c.Flags()
	f.StringVar(&system, "system", "", "a system message before the prompt")
	f.IntVar(&seed, "seed", 0, "sampling seed, for repeatable answers")
	f.IntVar(&maxTokens, "max-tokens", 0, "stop after this many tokens (default: the engine's)")
	f.Float64Var(&temperature, "temperature", 0, "sampling temperature (default: the engine's)")
	c.RunE = a.run(func(cmd *cobra.Command, args []string) error {
		model := args[0]
		prompt, err := a.prompt(args[1:])
		if err != nil {
			return err
		}
		var opt apiclient.ChatOptions
		if cmd.Flags().Changed("seed") {
			opt.Seed = &seed
		}
		if cmd.Flags().Changed("temperature") {
			if temperature < 0 {
				return usagef("--temperature %v: want 0 or more", temperature)
			}
			opt.Temperature = &temperature
		}
		if maxTokens < 0 {
			return usagef("--max-tokens %d: want a positive number", maxTokens)
		}
		opt.MaxTokens = maxTokens
		var msgs []apiclient.ChatMessage
		if system != "" {
			msgs = append(msgs, apiclient.ChatMessage{Role: "system", Content: system})
		}
		msgs = append(msgs, apiclient.ChatMessage{Role: "user", Content: prompt})

		return a.withSession(cmd, true, needAgents, func(ctx context.Context, s *session) error {
			out := chatOut{a: a}
			host, err := s.conn.Chat(ctx, model, msgs, opt, out.delta)
			if err != nil {
				out.breakLine()
				return err
			}
			return out.end(model, host)
		})
	})
	return c
}

// prompt is the argument, or stdin for "-" or for no argument when stdin is not a terminal.
func (a *app) prompt(args []string) (string, error) {
	if len(args) == 1 && args[0] != "-" {
		if strings.TrimSpace(args[0]) == "" {
			return "", usagef("the prompt is empty")
		}
		return args[0], nil
	}
	if len(args) == 0 {
		if f, ok := a.stdin.(*os.File); ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
			return "", usagef("give the prompt as an argument, or - to read it from stdin")
		}
	}
	b, err := io.ReadAll(io.LimitReader(a.stdin, maxPrompt+1))
	if err != nil {
		return "", fmt.Errorf("reading the prompt from stdin: %w", err)
	}
	if len(b) > maxPrompt {
		return "", usagef("the prompt on stdin is larger than %d MiB", maxPrompt>>20)
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return "", usagef("the prompt on stdin is empty")
	}
	return string(b), nil
}

// chatOut writes an answer as it arrives: each piece straight to stdout (no buffer, so a
// pipe sees tokens as they come), or one NDJSON line per piece.
type chatOut struct {
	a      *app
	last   byte // last byte written in text mode
	wrote  bool
	finish string
	usage  *apiclient.ChatUsage
}

func (o *chatOut) delta(d apiclient.ChatDelta) error {
	if d.FinishReason != "" {
		o.finish = d.FinishReason
	}
	if d.Usage != nil {
		o.usage = d.Usage
	}
	if d.Content == "" {
		return nil
	}
	if o.a.g.json {
		return o.a.writeCompact(ChatLine{Schema: Schema, Delta: d.Content})
	}
	if _, err := io.WriteString(o.a.stdout, d.Content); err != nil {
		return err
	}
	o.wrote, o.last = true, d.Content[len(d.Content)-1]
	return nil
}

// breakLine ends a partial answer with a newline, so the shell prompt does not follow it.
func (o *chatOut) breakLine() {
	if !o.a.g.json && o.wrote && o.last != '\n' {
		_, _ = io.WriteString(o.a.stdout, "\n")
		o.last = '\n'
	}
}

func (o *chatOut) end(model, host string) error {
	if o.a.g.json {
		return o.a.writeCompact(ChatLine{Schema: Schema, Done: true, Model: model, Host: host, FinishReason: o.finish, Usage: o.usage})
	}
	o.breakLine()
	if o.a.g.verbose {
		line := "answered by " + host
		if o.finish != "" {
			line += ", finished: " + o.finish
		}
		if o.usage != nil {
			line += fmt.Sprintf(", %d prompt + %d completion tokens", o.usage.PromptTokens, o.usage.CompletionTokens)
		}
		fmt.Fprintln(o.a.stderr, line)
	}
	return nil
}

// eventTypes are the types `mesh watch --type` accepts.
var eventTypes = []string{api.EventPlacement, api.EventRefused, api.EventDeleted, api.EventEngine, api.EventMesh, api.EventLog, api.EventIntent}

func (a *app) watchCmd() *cobra.Command {
	var types []string
	c := &cobra.Command{
		Use:   "watch",
		Short: "Stream the mesh's events (placement progress, refusals, deletions, engines, members)",
		Long: `Stream the events of every agent of the mesh, one line each (NDJSON with --json), until
Ctrl-C or --timeout; both end it with exit 0. Agents that join later are followed too.`,
		Args: a.args(cobra.NoArgs),
	}
	c.Flags().StringSliceVar(&types, "type", nil, "only these event types (repeatable or comma-separated): "+strings.Join(eventTypes, ", "))
	_ = c.RegisterFlagCompletionFunc("type", cobra.FixedCompletions(eventTypes, cobra.ShellCompDirectiveNoFileComp))
	c.PreRunE = func(*cobra.Command, []string) error {
		for _, t := range types {
			if !slices.Contains(eventTypes, t) {
				return usagef("--type %q: want one of %s", t, strings.Join(eventTypes, ", "))
			}
		}
		return nil
	}
	c.RunE = a.run(func(cmd *cobra.Command, _ []string) error {
		return a.withSession(cmd, true, needAgents, func(ctx context.Context, s *session) error {
			v, err := s.conn.ScopedView()
			if err != nil {
				return err
			}
			wctx, stop := context.WithCancel(ctx)
			defer stop()
			// Events may call emit for a moment after it returns (its followers stop on their own):
			// closed keeps those late events off stdout once the command is done.
			var (
				mu     sync.Mutex
				closed bool
				werr   error
			)
			// Said once every agent's stream is open, so a script that waits for it misses nothing.
			watching := func() {
				fmt.Fprintf(a.stderr, "watching mesh %s: %d agent(s); Ctrl-C to stop\n", v.Mesh, len(console.Agents(v)))
			}
			s.conn.Events(wctx, watching, func(ev api.Event) {
				mu.Lock()
				defer mu.Unlock()
				if closed || werr != nil || (len(types) > 0 && !slices.Contains(types, ev.Type)) {
					return
				}
				if a.g.json {
					werr = a.writeCompact(EventLine{Schema: Schema, Event: ev})
				} else {
					_, werr = fmt.Fprintln(a.stdout, eventText(ev))
				}
				if werr != nil {
					stop()
				}
			})
			mu.Lock()
			defer mu.Unlock()
			closed = true
			// Ctrl-C and --timeout are how a watch ends: that is success, exit 0.
			return werr
		})
	})
	return c
}
