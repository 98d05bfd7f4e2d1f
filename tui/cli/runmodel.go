package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/mattn/go-isatty"
	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/console"
)

func (a *app) runModelCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "run MODEL [PROMPT | -]",
		Short: "Chat with a model, placing it first when the mesh does not run it (like ollama run)",
		Long: `Chat with a model of the mesh. When no host runs it, the mesh keeps it running from now on
(an intent of one replica, placed on the best host) and the chat starts once it serves; progress
goes to stderr. MODEL is a name the mesh serves, a source (ollama://qwen2.5:0.5b, hailo://…,
hf://…), or an Ollama or Hailo zoo name (qwen2.5:0.5b).
With a prompt (or '-' for stdin) it answers once; without one, on a terminal, it chats turn by
turn ('/bye' or Ctrl-D ends it).`,
		Args:              a.args(cobra.RangeArgs(1, 2)),
		ValidArgsFunction: a.complete(completeModels),
	}
	c.RunE = a.run(func(cmd *cobra.Command, args []string) error {
		model := strings.TrimSpace(args[0])
		if model == "" {
			return usagef("the model is empty")
		}
		interactive := false
		var prompt string
		if len(args) == 1 {
			if f, ok := a.stdin.(*os.File); ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
				interactive = true
			}
		}
		if !interactive {
			p, err := a.prompt(args[1:])
			if err != nil {
				return err
			}
			prompt = p
		}
		return a.withSession(cmd, true, needAgents, func(ctx context.Context, s *session) error {
			name, err := a.ensureServed(ctx, s.conn, model)
			if err != nil {
				return err
			}
			if !interactive {
				out := chatOut{a: a}
				host, err := s.conn.Chat(ctx, name, []apiclient.ChatMessage{{Role: "user", Content: prompt}}, apiclient.ChatOptions{}, out.delta)
				if err != nil {
					out.breakLine()
					return err
				}
				return out.end(name, host)
			}
			return a.converse(ctx, s.conn, name)
		})
	})
	return c
}

// converse chats turn by turn on a terminal, keeping the conversation.
func (a *app) converse(ctx context.Context, conn *console.Conn, name string) error {
	var msgs []apiclient.ChatMessage
	in := bufio.NewScanner(a.stdin)
	in.Buffer(make([]byte, 64<<10), maxPrompt)
	for {
		fmt.Fprint(a.stderr, ">>> ")
		if !in.Scan() {
			fmt.Fprintln(a.stderr)
			return in.Err()
		}
		line := strings.TrimSpace(in.Text())
		switch line {
		case "":
			continue
		case "/bye":
			return nil
		}
		msgs = append(msgs, apiclient.ChatMessage{Role: "user", Content: line})
		out := chatOut{a: a}
		var answer strings.Builder
		_, err := conn.Chat(ctx, name, msgs, apiclient.ChatOptions{}, func(d apiclient.ChatDelta) error {
			answer.WriteString(d.Content)
			return out.delta(d)
		})
		out.breakLine()
		if err != nil {
			return err
		}
		msgs = append(msgs, apiclient.ChatMessage{Role: "assistant", Content: answer.String()})
	}
}

// ensureServed returns the name model is served under, placing it first when nothing serves
// it: an intent of one replica, which the mesh places on the best host and keeps.
func (a *app) ensureServed(ctx context.Context, conn *console.Conn, model string) (string, error) {
	if served(conn.View(), model) {
		return model, nil
	}
	var sources []string
	if strings.Contains(model, "://") || strings.HasPrefix(model, "/") {
		sources = []string{model}
	} else {
		sources = []string{"ollama://" + model, "hailo://" + model}
	}
	var errs []error
	for _, src := range sources {
		in, err := conn.Intend(ctx, api.PlacementRequest{Source: src})
		if err == nil {
			fmt.Fprintf(a.stderr, "placing %s (%s) where it ranks best\n", in.Name, in.Source)
			return in.Name, a.waitServing(ctx, conn, in)
		}
		errs = append(errs, fmt.Errorf("%s: %w", src, err))
	}
	if len(errs) == 1 {
		return "", errors.Unwrap(errs[0])
	}
	return "", &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("no host can run %q: %v", model, errors.Join(errs...))}
}

// waitServing follows an intent until a replica of it is ready, saying each step on stderr.
func (a *app) waitServing(ctx context.Context, conn *console.Conn, in api.Intent) error {
	last := ""
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		if sts, err := conn.Intents(ctx); err == nil {
			for _, st := range sts {
				if st.Key() != in.Key() {
					continue
				}
				line := api.IntentLine(st)
				for _, r := range st.Where {
					if r.State == api.StateReady && r.Counts {
						return nil
					}
					line += fmt.Sprintf("; %s on %s", r.State, r.Host)
				}
				if line != last {
					fmt.Fprintln(a.stderr, line)
					last = line
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// served reports whether a placement of the view serves model now, or wakes for it.
func served(v api.MeshView, model string) bool {
	for _, m := range console.Agents(v) {
		for _, p := range m.Placements {
			if p.QualifiedName() == model && (p.State == api.StateReady || p.State == api.StateSleeping) {
				return true
			}
		}
	}
	return false
}
