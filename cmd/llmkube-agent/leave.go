package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/assets"
)

type leaveOptions struct {
	svc      serviceOptions
	purge    bool
	stopWait time.Duration
}

func leaveCommand(e env) *cobra.Command {
	lo := &leaveOptions{}
	cmd := &cobra.Command{
		Use:   "leave",
		Short: "Undo join: stop the agent (it leaves the mesh gracefully), remove the service join installed",
		Long: `leave stops the agent join installed — it leaves the mesh first, so peers show it "left", not
dead, and it stops the engines it started — then disables and removes the systemd unit or launchd
plist that join wrote and reloads the service manager. A service file join did not write is named
and left alone. The state folder and the model store are kept unless --purge.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return lo.leave(cmd.Context(), e)
		},
	}
	f := cmd.Flags()
	serviceFlags(f, &lo.svc, true)
	f.BoolVar(&lo.purge, "purge", false, "also delete the state folder (the mesh secret, placements) and the model store")
	f.DurationVar(&lo.stopWait, "timeout", 45*time.Second, "how long to wait for the agent to stop")
	return cmd
}

func (lo *leaveOptions) leave(ctx context.Context, e env) error {
	w := e.stdout
	plan, err := lo.svc.plan(e)
	if err != nil {
		return err
	}
	rec, _ := readRecord(plan.params.StateDir)
	path := plan.path
	if rec.Path != "" {
		path = rec.Path
	}
	content, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if lo.purge {
			if err := lo.purgeFolders(w, plan, rec); err != nil {
				return err
			}
		}
		return fmt.Errorf("nothing to leave: no service at %s (did join run as this user%s?)", path, map[bool]string{true: "", false: ", or with --system"}[plan.mgr.kind == systemdSystem])
	case err != nil:
		return err
	case !assets.Managed(content):
		return fmt.Errorf("%s was not written by llmkube-agent join: left alone (stop and remove it the way it was installed)", path)
	}
	if err := plan.mgr.preflight(ctx); err != nil {
		return err
	}

	// Stop: SIGTERM makes the agent leave the mesh and stop its engines before it exits.
	if err := plan.mgr.stop(ctx); err != nil {
		return fmt.Errorf("stopping the service: %w", err)
	}
	fmt.Fprintf(w, "stopped and disabled %s: the agent left the mesh and stopped its engines\n", plan.mgr.unitName())
	if rec.API != "" {
		if err := waitGone(ctx, rec.API, lo.stopWait); err != nil {
			return fmt.Errorf("the agent still answers at %s after %v; its log: %s", rec.API, lo.stopWait, plan.mgr.logs(plan.params.LogDir))
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("removing %s: %w", path, err)
	}
	fmt.Fprintf(w, "removed %s\n", path)
	if err := plan.mgr.forget(ctx); err != nil {
		return err
	}
	if plan.mgr.kind != launchdAgent {
		fmt.Fprintln(w, "reloaded systemd")
	}
	_ = os.Remove(filepath.Join(plan.params.StateDir, serviceRecord))
	return lo.purgeFolders(w, plan, rec)
}

// purgeFolders deletes the state folder and model store with --purge, or says they are kept.
func (lo *leaveOptions) purgeFolders(w io.Writer, plan servicePlan, rec serviceRecordDoc) error {
	models := plan.params.ModelsDir
	if rec.Models != "" {
		models = rec.Models
	}
	if !lo.purge {
		fmt.Fprintf(w, "kept the state folder %s (the mesh secret: a later join or run uses it) and the model store %s; --purge deletes them\n", plan.params.StateDir, models)
		return nil
	}
	for _, d := range []string{models, plan.params.StateDir} {
		if err := os.RemoveAll(d); err != nil {
			return fmt.Errorf("deleting %s: %w", d, err)
		}
		fmt.Fprintf(w, "deleted %s\n", d)
	}
	return nil
}

func readRecord(stateDir string) (serviceRecordDoc, error) {
	var r serviceRecordDoc
	b, err := os.ReadFile(filepath.Join(stateDir, serviceRecord))
	if err != nil {
		return r, err
	}
	if len(b) > 64<<10 {
		return r, errors.New("service record too large")
	}
	return r, json.Unmarshal(b, &r)
}

// waitGone waits until nothing answers at url any more.
func waitGone(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/healthz", nil)
		resp, err := hc.Do(req)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return nil
		}
		resp.Body.Close()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
