package console

import (
	"context"
)

// PlacementLog is the last n bytes of a placement's engine log on its host (the host detail's
// tail), asked of that host as every other action asks it.
func (c *Conn) PlacementLog(ctx context.Context, host, id string, n int) (string, error) {
	cl, err := c.Client(host)
	if err != nil {
		return "", err
	}
	ctx, cancel := c.callCtx(ctx)
	defer cancel()
	return cl.PlacementLog(ctx, id, n)
}
