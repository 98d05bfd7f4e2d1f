package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/netnslab"
)

// peersOrigin is where the model's origin listens: host a's loopback, which no other host can
// reach, as if a alone had the internet.
const peersOrigin = "127.0.0.1:8090"

// TestLANPeers: three agents on a LAN of namespaces, the model's origin reachable from the first
// alone. The first downloads a GGUF from it; the second and third get it from their peers over
// the sealed channel (sized from a peer's header, copied, verified against the digest), and no
// byte of the file crosses the LAN in the clear.
// peersHEF is the Hailo model the Pis copy from each other: in both the 5.1.1 and 5.4 zoos under
// one name, so hailo-sim makes the same HEF for both.
const peersHEF = "qwen2:1.5b"

func TestLANPeers(t *testing.T) {
	skipUnlessLAN(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	e := newEnv(t, dir)
	if err := buildPrograms(e.bin); err != nil {
		t.Fatal(err)
	}
	hosts := []*netHost{e.lab.addHost("pi5a", false), e.lab.addHost("pi5b", false), e.lab.addHost("pi5c", false)}
	e.laptop = e.lab.addHost("laptop", false)
	var err error
	e.join, e.admin, err = e.initMesh(ctx, hosts[0], filepath.Join(hosts[0].Dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	e.sealClients(t, append(slices.Clone(hosts), e.laptop)...)

	// The model, served by its origin inside a's namespace only.
	model, err := writeGGUF(filepath.Join(dir, "origin"), "sim-tiny")
	if err != nil {
		t.Fatal(err)
	}
	content, err := os.ReadFile(model)
	if err != nil {
		t.Fatal(err)
	}
	d := sha256.Sum256(content)
	sum := hex.EncodeToString(d[:])
	var ln net.Listener
	if err := netnslab.Enter(hosts[0].NS, func() (err error) {
		ln, err = net.Listen("tcp", peersOrigin)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "tiny.gguf", time.Time{}, bytes.NewReader(content))
	})}
	go origin.Serve(ln)
	t.Cleanup(func() { origin.Close() })

	var agents []*agentHost
	// The first two Pis run hailo-ollama 5.4, which names the HEF by path and takes its digest
	// from the library's .sha256 companion; the third runs 5.1.1, which names it by digest. The
	// model is one both releases name alike, so its HEF is the same file.
	versions := []string{"5.4", "5.4", "5.1.1"}
	for i, h := range hosts {
		// Each host's hailo-ollama (hailo-sim) pulls HEFs from its agent's library mirror, whose
		// upstream, Hailo's library, is on the first host's loopback alone.
		hailoHome := filepath.Join(h.Dir, "hailo-home")
		mirror := fmt.Sprintf("http://127.0.0.1:%d/hailo-library", apiPort)
		a := e.newAgent(h, e.join, demoRoot(t, h, "pi5-hailo"), "linux", "arm64",
			"--runtimes", "llama-server,hailo-ollama", "--llama-server", e.prog("llama-server"), "--memory-budget", "4GiB",
			"--hailo-url", hailoURL, "--hailo-manifests-dir", filepath.Join(hailoHome, ".local", "share", "hailo-ollama", "models", "manifests"),
			"--hailo-library-url", mirror, "--hailo-library-mirror", "http://"+hailoLib,
			"--allow-http", "--allow-private-downloads", "--no-mdns", "--gossip-port", "7946", "--join", hosts[0].Addr+":7946")
		a.extra = append(a.extra, "LLAMA_SIM_LOAD_DELAY=0s")
		libListen := "127.0.0.1:0" // its own library: a port no one is told of
		if i == 0 {
			libListen = hailoLib
		}
		sim := []string{"--home", hailoHome, "--listen", strings.TrimPrefix(hailoURL, "http://"), "--library-listen", libListen,
			"--library-url", mirror, "--load-time", "100ms", "--switch-delay", "50ms", "--version", versions[i]}
		if versions[i] == "5.4" {
			sim = append(sim, "--filename-manifests", peersHEF) // 5.4's manifests name the HEF by path
		}
		if err := a.startEngine(ctx, "hailo-sim", nil, hailoURL+"/hailo/v1/list", sim...); err != nil {
			t.Fatal(err)
		}
		if err := a.start(); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	// Every agent sees the others alive.
	for _, a := range agents {
		_, err := eventually(ctx, 45*time.Second, func(ctx context.Context) (bool, string) {
			if a.agent.exited() {
				return false, "the agent exited:\n" + a.agent.tail(30)
			}
			v, err := e.client(e.laptop, a, e.admin).Mesh(ctx)
			if err != nil {
				return false, err.Error()
			}
			alive := 0
			for _, m := range v.Members {
				if m.Liveness == api.Alive && m.Host != nil {
					alive++
				}
			}
			return alive == len(agents), fmt.Sprintf("%s sees %d agents alive", a.Name, alive)
		})
		if err != nil {
			t.Fatalf("%s: %v", a.Name, err)
		}
	}

	place := func(a *agentHost, name string) api.Placement {
		t.Helper()
		return placeOn(ctx, t, e, a, api.PlacementRequest{Source: "http://" + peersOrigin + "/tiny.gguf", SHA256: sum, Name: name})
	}
	place(agents[0], "tiny-a")
	// The others learn by gossip that the first holds the file.
	seeHeld(ctx, t, e, agents, func(holds []string) bool { return slices.Contains(holds, sum[:api.HoldPrefix]) })

	c, err := startCapture(e.lab.hub)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range agents[1:] {
		pl := place(a, "tiny-"+a.Name)
		if !strings.Contains(pl.Memory.Detail, "from peer") {
			t.Errorf("%s sized the model from %q, not from a peer", a.Name, pl.Memory.Detail)
		}
		log, _ := os.ReadFile(a.agent.Log)
		if !bytes.Contains(log, []byte("copied a file from peers")) {
			t.Errorf("%s's log does not say it copied the file from peers:\n%s", a.Name, a.agent.tail(30))
		}
		if !holds(filepath.Join(a.Dir, "models"), content) {
			t.Errorf("%s's model store does not hold the file", a.Name)
		}
	}
	// A HEF: the first host's hailo-ollama pulls it through its agent's mirror from the library;
	// the others', through theirs, from the first host. The second, a 5.4 with no route to the
	// library, learns the HEF's digest (the companion its hailo-ollama asks first) from a peer.
	for i, a := range agents {
		// Placed right after the previous host's replica was deleted, while this host's view may
		// still show it: the keeper leaves such a surplus alone until the view settles.
		pl := placeOn(ctx, t, e, a, api.PlacementRequest{Source: "hailo://" + peersHEF})
		log, _ := os.ReadFile(a.agent.Log)
		if i == 0 {
			seeHeld(ctx, t, e, agents, func(holds []string) bool { return len(holds) >= 2 }) // the GGUF and the HEF
		} else if bytes.Count(log, []byte("copied a file from peers")) < 2 {
			t.Errorf("%s's log does not say it copied the HEF from peers:\n%s", a.Name, a.agent.tail(30))
		}
		if fromPeer := bytes.Contains(log, []byte("a HEF's digest from a peer")); fromPeer != (i == 1) {
			t.Errorf("%s (hailo-ollama %s) took the HEF's digest from a peer: %v, want %v:\n%s", a.Name, versions[i], fromPeer, i == 1, a.agent.tail(30))
		}
		if err := e.client(e.laptop, a, e.admin).Delete(ctx, pl.ID); err != nil {
			t.Errorf("deleting %s on %s: %v", pl.ID, a.Name, err)
		}
	}
	frames, apiBytes := c.stop()
	if apiBytes < len(content) {
		t.Errorf("the capture saw %d bytes on the API port, fewer than the file's %d: it did not watch the copies", apiBytes, len(content))
	}
	// The file's header (its metadata keys and vocabulary) and a slice of its body must not be
	// found in what crossed the bridge.
	type sample struct{ b, of []byte } // a piece, and the file it must be a piece of alone
	samples := []sample{{[]byte("general.architecture"), content}, {content[len(content)/2 : len(content)/2+64], content}, {content[32:96], content}}
	hefs, _ := filepath.Glob(filepath.Join(agents[0].Dir, "models", "hailo", "sha256_*.hef"))
	if len(hefs) != 1 {
		t.Errorf("the first host's store holds %d HEFs, not one", len(hefs))
	}
	for _, p := range hefs {
		if hef, err := os.ReadFile(p); err == nil && len(hef) > 4096 {
			samples = append(samples, sample{hef[1024:1088], hef}, sample{hef[len(hef)-100 : len(hef)-36], hef})
		}
	}
	looked := 0
	for _, s := range samples {
		if bytes.Count(s.of, s.b) != 1 {
			continue // not a sample of this file alone
		}
		looked++
		if bytes.Contains(frames, s.b) {
			t.Errorf("%.40q… of a model crossed the LAN in the clear", s.b)
		}
	}
	if looked < 4 { // the GGUF's three, and the HEF's
		t.Errorf("only %d samples of the models to look for in the capture", looked)
	}
	t.Logf("the copies to pi5b and pi5c: %d bytes on the API port, sealed (%d samples of the models looked for)", apiBytes, looked)
}

// holds reports whether a file under dir has exactly content.
func holds(dir string, content []byte) bool {
	found := false
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && strings.HasSuffix(p, ".gguf") {
			b, err := os.ReadFile(p)
			found = found || (err == nil && bytes.Equal(b, content))
		}
		return nil
	})
	return found
}

// placeOn places req on a and waits until it is ready.
func placeOn(ctx context.Context, t *testing.T, e *env, a *agentHost, req api.PlacementRequest) api.Placement {
	t.Helper()
	c := e.client(e.laptop, a, e.admin)
	pl, err := c.Place(ctx, req)
	if err != nil {
		t.Fatalf("placing %s on %s: %v\n%s", req.Source, a.Name, err, a.agent.tail(30))
	}
	pl, err = c.WaitPlacement(ctx, pl.ID, 100*time.Millisecond, nil)
	if err != nil || pl.State != api.StateReady {
		t.Fatalf("placement of %s on %s: %v %s %s\n%s", req.Source, a.Name, err, pl.State, pl.Reason, a.agent.tail(30))
	}
	return pl
}

// seeHeld waits until every agent but the first sees, by gossip, the first hold files as held says.
func seeHeld(ctx context.Context, t *testing.T, e *env, agents []*agentHost, held func(holds []string) bool) {
	t.Helper()
	first := agents[0].Name
	for _, a := range agents[1:] {
		if _, err := eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, string) {
			v, err := e.client(e.laptop, a, e.admin).Mesh(ctx)
			if err != nil {
				return false, err.Error()
			}
			m, ok := member(v, first)
			if !ok || m.Host == nil || m.Host.Files == nil {
				return false, a.Name + " sees no files of " + first
			}
			return held(m.Host.Files.Holds), fmt.Sprintf("%s sees %s hold %v", a.Name, first, m.Host.Files.Holds)
		}); err != nil {
			t.Fatal(err)
		}
	}
}
