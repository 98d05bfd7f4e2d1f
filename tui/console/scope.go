package console

import "github.com/llmkube/mesh/agent/api"

// ScopedView is View limited to the placements the connection's token may see. A console that
// joined the mesh receives every namespace's placements by gossip; with a namespace token it
// must show what that token would see through an agent's API (which filters GET /v1/mesh), so
// both ways of connecting show the same. A token the mesh secret does not verify sees nothing
// and gets the Unauthorized error an agent would answer with.
func (c *Conn) ScopedView() (api.MeshView, error) {
	v := c.View()
	if c.opts.Join == "" {
		return v, nil // through an agent without the secret: the agent scoped the view already
	}
	j, err := api.ParseJoin(c.opts.Join)
	if err != nil {
		return api.MeshView{}, err
	}
	who, err := api.Verify(j.Secret, c.token)
	if err != nil {
		return api.MeshView{}, api.Errorf(api.CodeUnauthorized, "token refused: %v", err)
	}
	return who.ScopeView(v), nil
}

// principal is whom the connection's token speaks for, as far as the console can tell: through
// an agent (no secret here) the agent scopes what it answers and this is the admin's view of
// it; with a join string the token is verified, and one the secret refuses sees nothing scoped.
func (c *Conn) principal() api.Principal {
	if c.opts.Join == "" {
		return api.Principal{Admin: true}
	}
	j, err := api.ParseJoin(c.opts.Join)
	if err != nil {
		return api.Principal{}
	}
	who, err := api.Verify(j.Secret, c.token)
	if err != nil {
		return api.Principal{}
	}
	return who
}
