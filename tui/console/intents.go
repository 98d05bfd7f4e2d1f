package console

import (
	"context"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
)

// Intents returns what the mesh keeps running, with how each intent is met, as the first alive
// agent that answers sees it: every agent keeps every intent.
func (c *Conn) Intents(ctx context.Context) ([]api.IntentStatus, error) {
	var out []api.IntentStatus
	err := c.anyAgent(ctx, func(ctx context.Context, cl *apiclient.Client) (err error) {
		out, err = cl.Intents(ctx)
		return err
	})
	return out, err
}

// Intend asks the mesh to keep a model running wherever it ranks best (no host chosen).
func (c *Conn) Intend(ctx context.Context, req api.PlacementRequest) (api.Intent, error) {
	var in api.Intent
	// The agent that records it sizes it: one that can run it first (see agentsFor).
	err := c.agentOf(ctx, agentsFor(c.View(), req), func(ctx context.Context, cl *apiclient.Client) (err error) {
		in, err = cl.Intend(ctx, req)
		return err
	})
	return in, err
}

// anyAgent calls the alive agents in turn until one answers (an API error is an answer).
func (c *Conn) anyAgent(ctx context.Context, call func(context.Context, *apiclient.Client) error) error {
	return c.agentOf(ctx, Agents(c.View()), call)
}

// agentOf calls agents in turn until one answers (an API error is an answer).
func (c *Conn) agentOf(ctx context.Context, agents []api.Member, call func(context.Context, *apiclient.Client) error) error {
	v := c.View()
	err := error(ErrNoAgents)
	for _, a := range agents {
		cctx, cancel := c.callCtx(ctx)
		err = call(cctx, c.clientOf(v, a))
		cancel()
		if _, unreachable := err.(*apiclient.UnreachableError); !unreachable {
			return err
		}
	}
	return err
}

// SetAlias makes name a mesh-wide name for a source, placed on the first request that names it.
func (c *Conn) SetAlias(ctx context.Context, name string, req api.AliasRequest) (api.Intent, error) {
	var in api.Intent
	err := c.anyAgent(ctx, func(ctx context.Context, cl *apiclient.Client) (err error) {
		in, err = cl.SetAlias(ctx, name, req)
		return err
	})
	return in, err
}

// Unintend deletes an intent (or an alias): every replica of it is removed.
func (c *Conn) Unintend(ctx context.Context, namespace, name string) (api.Intent, error) {
	var in api.Intent
	err := c.anyAgent(ctx, func(ctx context.Context, cl *apiclient.Client) (err error) {
		in, err = cl.Unintend(ctx, namespace, name)
		return err
	})
	return in, err
}
