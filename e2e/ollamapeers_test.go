package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/enginetest"
	"github.com/llmkube/mesh/engines/ollama"
)

// TestLANOllamaPeers: two agents on a LAN of namespaces, each beside a real Ollama, and no
// registry anywhere (the LAN has no route out). The first host's daemon has a model made with
// `ollama create`; the second host's daemon pulls it through its agent's registry mirror from
// the first host over the sealed channel, and clients see it by its own name. The Ollama
// simulator cannot stand in here: its pulls copy no bytes and its blobs are not named by their
// content, so the real engine is used, and the test skips without it.
func TestLANOllamaPeers(t *testing.T) {
	skipUnlessLAN(t)
	bin, gguf := enginetest.Ollama(t), enginetest.TinyGGUF(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	dir := t.TempDir()
	e := newEnv(t, dir)
	if err := buildPrograms(e.bin); err != nil {
		t.Fatal(err)
	}
	hosts := []*netHost{e.lab.addHost("olla", false), e.lab.addHost("ollb", false)}
	e.laptop = e.lab.addHost("laptop", false)
	var err error
	e.join, e.admin, err = e.initMesh(ctx, hosts[0], filepath.Join(hosts[0].Dir, "state"))
	if err != nil {
		t.Fatal(err)
	}
	e.sealClients(t, append(slices.Clone(hosts), e.laptop)...)

	const daemon = "127.0.0.1:11434"
	var agents []*agentHost
	for _, h := range hosts {
		models := filepath.Join(h.Dir, "ollama")
		a := e.newAgent(h, e.join, demoRoot(t, h, "gpu-server"), "linux", "amd64",
			"--runtimes", "ollama", "--ollama-url", "http://"+daemon, "--ollama-models", models, "--memory-budget", "8GiB",
			"--no-mdns", "--gossip-port", "7946", "--join", hosts[0].Addr+":7946",
			// Paced, so the capture's socket keeps up with the copy and sees every frame.
			"--serve-rate", "16MB")
		env := []string{"HOME=" + h.Dir, "OLLAMA_MODELS=" + models, "OLLAMA_HOST=" + daemon}
		p, err := a.spawn("ollama", env, bin, "serve")
		if err != nil {
			t.Fatal(err)
		}
		a.engines["ollama"] = p
		if _, err := eventually(ctx, 30*time.Second, func(ctx context.Context) (bool, string) {
			if p.exited() {
				return false, "ollama exited:\n" + p.tail(20)
			}
			code, _, err := a.get(ctx, "http://"+daemon+"/api/version", "")
			return err == nil && code == 200, fmt.Sprint(code, err)
		}); err != nil {
			t.Fatal(err)
		}
		agents = append(agents, a)
	}
	// The first host's daemon makes the model.
	mf := filepath.Join(dir, "Modelfile")
	if err := os.WriteFile(mf, []byte("FROM "+gguf+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	create, err := agents[0].spawn("ollama-create", []string{"HOME=" + agents[0].Dir, "OLLAMA_HOST=" + daemon}, bin, "create", "tiny:1", "-f", mf)
	if err != nil {
		t.Fatal(err)
	}
	<-create.done
	if create.err != nil {
		t.Fatalf("ollama create: %v\n%s", create.err, create.tail(20))
	}
	_, man, err := ollama.ReadManifest(filepath.Join(agents[0].Dir, "ollama"), ollama.Name{Namespace: "library", Model: "tiny", Tag: "1"})
	if err != nil {
		t.Fatal(err)
	}
	var blob []byte
	for _, l := range man.Layers {
		if l.MediaType == "application/vnd.ollama.image.model" {
			blob, err = os.ReadFile(ollama.BlobFile(filepath.Join(agents[0].Dir, "ollama"), strings.TrimPrefix(l.Digest, "sha256:")))
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, a := range agents {
		if err := a.start(); err != nil {
			t.Fatal(err)
		}
	}
	// The second sees the first's daemon list the model and hold its blobs.
	if _, err := eventually(ctx, 60*time.Second, func(ctx context.Context) (bool, string) {
		if agents[1].agent.exited() {
			return false, "the agent exited:\n" + agents[1].agent.tail(30)
		}
		v, err := e.client(e.laptop, agents[1], e.admin).Mesh(ctx)
		if err != nil {
			return false, err.Error()
		}
		m, ok := member(v, agents[0].Name)
		if !ok || m.Liveness != api.Alive || m.Host == nil || m.Host.Files == nil {
			return false, "no files of " + agents[0].Name + " seen"
		}
		lists := slices.ContainsFunc(m.Host.Engines, func(en api.Engine) bool {
			return en.Runtime == api.RuntimeOllama && slices.ContainsFunc(en.Models, func(s string) bool { return ollama.SameModel(s, "tiny:1") })
		})
		return lists && len(m.Host.Files.Holds) >= len(man.Layers), fmt.Sprintf("%s lists tiny:1: %v; holds %d", agents[0].Name, lists, len(m.Host.Files.Holds))
	}); err != nil {
		t.Fatal(err)
	}

	c, err := startCapture(e.lab.hub)
	if err != nil {
		t.Fatal(err)
	}
	pl := placeOn(ctx, t, e, agents[1], api.PlacementRequest{Source: "ollama://tiny:1"})
	frames, apiBytes := c.stop()
	if !strings.Contains(pl.Memory.Detail, "peer "+agents[0].Name) {
		t.Errorf("sized from %q, not from the peer", pl.Memory.Detail)
	}
	log, _ := os.ReadFile(agents[1].agent.Log)
	for _, want := range []string{"Ollama manifest from a peer", "copied a file from peers"} {
		if !bytes.Contains(log, []byte(want)) {
			t.Errorf("%s's log does not say %q:\n%s", agents[1].Name, want, agents[1].agent.tail(30))
		}
	}
	_, body, err := agents[1].get(ctx, "http://"+daemon+"/api/tags", "")
	if err != nil {
		t.Fatal(err)
	}
	var tags struct {
		Models []struct{ Name string } `json:"models"`
	}
	if err := json.Unmarshal(body, &tags); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, m := range tags.Models {
		names = append(names, m.Name)
	}
	if !slices.Contains(names, "tiny:1") || len(names) != 1 {
		t.Errorf("the second daemon lists %v, want tiny:1 alone (the mirror's name deleted)", names)
	}
	if apiBytes < len(blob) {
		t.Errorf("the capture saw %d bytes on the API port, fewer than the blob's %d", apiBytes, len(blob))
	}
	sample := blob[len(blob)/2 : len(blob)/2+64]
	if bytes.Count(blob, sample) != 1 {
		t.Fatalf("the blob's middle is not a piece of it alone: nothing to look for in the capture")
	}
	if bytes.Contains(frames, sample) {
		t.Errorf("a piece of the model blob crossed the LAN in the clear")
	}
	t.Logf("the copy to %s: %d bytes on the API port, sealed", agents[1].Name, apiBytes)
}
