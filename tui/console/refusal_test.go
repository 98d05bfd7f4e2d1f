package console

import (
	"errors"
	"testing"

	"github.com/llmkube/mesh/agent/api"
)

func TestRankingRefusal(t *testing.T) {
	fits := Ranking{Hosts: []api.Ranked{
		{Host: "pi5", Verdict: api.VerdictRefused, Code: api.CodeAcceleratorMissing, Reason: "refused: no Hailo-10H"},
		{Host: "mac", Verdict: api.VerdictSwap, Reason: "swap"},
	}}
	if err := fits.Refusal(); err != nil {
		t.Fatalf("a host that swaps fits: %v", err)
	}
	none := Ranking{Hosts: []api.Ranked{
		{Host: "pi5", Verdict: api.VerdictRefused, Code: api.CodeInsufficientMemory, Reason: "refused: needs 5.0 GiB, 1.0 GiB free"},
		{Host: "mac", Verdict: api.VerdictRefused, Code: api.CodeRuntimeMismatch, Reason: "refused: no ollama"},
	}}
	var ae *api.Error
	if err := none.Refusal(); !errors.As(err, &ae) {
		t.Fatalf("want *api.Error, got %v", err)
	}
	if ae.Code != api.CodeInsufficientMemory {
		t.Errorf("code %s: want the best host's", ae.Code)
	}
	if want := "no host can take it — pi5: refused: needs 5.0 GiB, 1.0 GiB free; mac: refused: no ollama"; ae.Message != want {
		t.Errorf("message %q, want %q", ae.Message, want)
	}
	if err := (Ranking{}).Refusal(); !errors.Is(err, ErrNoAgents) {
		t.Errorf("no hosts: %v, want ErrNoAgents", err)
	}
}

// TestCanRunReadsTheSchemeAsTheParserDoes: the console's own copy of the scheme rule was
// case-sensitive, so it asked an agent without Ollama first to size OLLAMA://x.
func TestCanRunReadsTheSchemeAsTheParserDoes(t *testing.T) {
	ollama := api.Member{Host: &api.Host{Engines: []api.Engine{{Runtime: api.RuntimeOllama, Present: true}}}}
	llama := api.Member{Host: &api.Host{Engines: []api.Engine{{Runtime: api.RuntimeLlamaServer, Present: true}}}}
	for _, src := range []string{"ollama://qwen2:1.5b", "OLLAMA://qwen2:1.5b", " Ollama://qwen2"} {
		req := api.PlacementRequest{Source: src}
		if !canRun(ollama, req) || canRun(llama, req) {
			t.Errorf("%q: want only the Ollama agent", src)
		}
	}
	if !canRun(llama, api.PlacementRequest{Source: "/m/x.gguf"}) {
		t.Error("a GGUF runs on llama-server")
	}
}

func TestOptionsMode(t *testing.T) {
	for _, c := range []struct {
		opts Options
		want Mode
	}{
		{Options{Join: "j"}, ModeMember},
		{Options{AgentURL: "http://127.0.0.1:7777"}, ModeAgent},
		{Options{Join: "j", AgentURL: "http://127.0.0.1:7777"}, ModeAgent}, // the agent is asked, the join string gives the token
	} {
		got, err := c.opts.Mode()
		if err != nil || got != c.want {
			t.Errorf("%+v: %q, %v; want %q", c.opts, got, err, c.want)
		}
	}
	if _, err := (Options{}).Mode(); err == nil {
		t.Error("no join string and no agent: want an error saying what to give")
	}
}
