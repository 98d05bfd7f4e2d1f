package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// remoteModel is what the laptop that reaches one agent places.
const remoteModel = "gemma3:1b"

// checkRemoteLaptop: a laptop across a subnet reaches one agent only (box; blackhole routes to
// the others), as the README's --agent is for. Through that agent it places a model on x86,
// waits, chats and deletes it: every call goes to box, which forwards it (issue 42: the console
// dialled the owner itself, and got Unreachable). And when place --wait says ready, every
// agent's gateway serves the model at once (issue 42: for up to 0.45 s others answered 404 or
// "loading").
func checkRemoteLaptop(ctx context.Context, t *testing.T, e *env, n note) {
	remote := e.lab.addHost("remote", true)
	e.sealClients(t, remote)
	caFile := filepath.Join(remote.Dir, "mesh-ca.pem")
	if err := e.writeCA(ctx, caFile); err != nil {
		t.Fatal(err)
	}
	if code, _, err := remote.get(ctx, e.box.apiURL()+"/healthz", ""); err != nil || code != 200 {
		t.Fatalf("the remote laptop does not reach box: HTTP %d, %v", code, err)
	}
	for _, a := range []*agentHost{e.pi, e.x86} {
		e.lab.must("-n", remote.NS, "route", "add", "blackhole", a.Addr+"/32")
	}
	if code, _, err := remote.get(ctx, e.x86.apiURL()+"/healthz", ""); err == nil {
		t.Fatalf("the remote laptop reaches x86 (HTTP %d): the blackhole route does not hold", code)
	}
	run := func(args ...string) cliResult {
		start := time.Now()
		full := append([]string{"mesh"}, append(args, "--agent", e.box.apiURL(), "--ca-file", caFile, "--json")...)
		out, errOut, code, err := remote.run(ctx, []string{"LLMKUBE_TOKEN=" + e.admin}, e.prog("llmkube-tui"), full...)
		if err != nil {
			errOut += "\n(could not run: " + err.Error() + ")"
		}
		return cliResult{args: full, stdout: out, stderr: errOut, code: code, took: time.Since(start)}
	}

	r := run("place", "ollama://"+remoteModel, "--host", e.x86.Name, "--wait", "--timeout", "60s")
	var doc struct {
		Placement api.Placement `json:"placement"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil || r.code != 0 || doc.Placement.State != api.StateReady || doc.Placement.Host != e.x86.Name {
		t.Fatalf("place --wait through box: %v %s", err, r)
	}
	ready := time.Now()
	n("place --wait through box: %s ready on %s in %.2fs", remoteModel, doc.Placement.Host, r.took.Seconds())

	// Every agent's gateway, at once, as a script would go on.
	var wg sync.WaitGroup
	chats := make([]chatResult, len(e.agents()))
	for i, a := range e.agents() {
		wg.Go(func() { chats[i] = e.chat(ctx, a, e.admin, remoteModel, true, 2, nil) })
	}
	wg.Wait()
	for i, a := range e.agents() {
		if !chats[i].ok() {
			t.Errorf("a chat with %s through %s %.2fs after place --wait returned: %s", remoteModel, a.Name, time.Since(ready).Seconds(), chats[i])
		}
	}

	r = run("chat", remoteModel, "Hello there", "--timeout", "30s")
	if r.code != 0 || !strings.Contains(r.stdout, `"done":true`) {
		t.Errorf("mesh chat through box: %s", r)
	}
	n("mesh chat through box: %.2fs", r.took.Seconds())
	r = run("models", "--timeout", "20s")
	if r.code != 0 || !strings.Contains(r.stdout, doc.Placement.ID) {
		t.Errorf("mesh models through box does not list %s: %s", doc.Placement.ID, r)
	}
	r = run("delete", doc.Placement.ID, "--timeout", "30s")
	if r.code != 0 {
		t.Fatalf("mesh delete through box: %s", r)
	}
	n("mesh delete through box: %.2fs", r.took.Seconds())
	if _, err := eventually(ctx, 10*time.Second, func(ctx context.Context) (bool, string) {
		v, err := e.view(ctx, e.x86)
		if err != nil {
			return false, err.Error()
		}
		m, _ := member(v, e.x86.Name)
		for _, p := range m.Placements {
			if p.ID == doc.Placement.ID {
				return false, fmt.Sprintf("x86 still holds %s (%s)", p.ID, p.State)
			}
		}
		return true, ""
	}); err != nil {
		t.Error(err)
	}
}
