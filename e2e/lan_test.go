// Package e2e runs the mesh as users run it, on a LAN made of network namespaces: the real
// programs (built here), mDNS and no seeds, simulated engines, a laptop namespace running the
// console's headless commands, and faults on that LAN (a crashed agent, a cut cable, a dead
// engine, a stranger with another join string, a host under full CPU load).
//
// `make e2e` runs it as root (CI does); `go test ./...` skips it unless LLMKUBE_E2E=1, so
// `make test` does not run it twice. It skips, saying why, where namespaces cannot be made.
// Every step's timing and the figures it measured go into a report (see reportEnv).
package e2e

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"
)

// gateEnv turns the run on; onlyEnv, a regular expression, picks the checks to run (all when
// empty; the LAN is made and every agent started whatever it says), for working on one.
const (
	gateEnv = "LLMKUBE_E2E"
	onlyEnv = "LLMKUBE_E2E_CHECKS"
)

func TestLAN(t *testing.T) {
	if os.Getenv(gateEnv) == "" {
		t.Skip("the multi-host end-to-end run is `make e2e` (set " + gateEnv + "=1)")
	}
	rep := newReport()
	t.Cleanup(func() { rep.write(t) })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	e := &env{t: t, bin: filepath.Join(dir, "bin"), events: &eventLog{}}

	if r := skipReason(); r != "" {
		rep.add("SKIP %s", r)
		t.Skip(r)
	}
	e.lab = newLab(t, dir)
	if !rep.step(t, "build the programs", func(t *testing.T, note func(string, ...any)) {
		if err := buildPrograms(e.bin); err != nil {
			t.Fatal(err)
		}
	}) {
		t.FailNow()
	}
	if !rep.step(t, "start the LAN and agents", func(t *testing.T, note func(string, ...any)) {
		e.startLAN(ctx, t, note)
	}) {
		t.FailNow()
	}
	only, err := regexp.Compile(os.Getenv(onlyEnv))
	if err != nil {
		t.Fatalf("%s: %v", onlyEnv, err)
	}
	for _, c := range checks {
		// Discovery always runs: every other check stands on a mesh that has formed.
		if !only.MatchString(c.name) && c.name != checks[0].name {
			rep.add("---- %s (not selected by %s)", c.name, onlyEnv)
			continue
		}
		rep.step(t, c.name, func(t *testing.T, note func(string, ...any)) { c.run(ctx, t, e, note) })
	}
}
