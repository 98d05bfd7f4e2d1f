package rank

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

func gibs(f float64) int64 { return int64(f * float64(gib)) }

// agent is a live agent with every runtime installed and free GiB of budget.
func agent(name string, free float64) api.Member {
	return api.Member{
		Name: name, Role: api.RoleAgent, Liveness: api.Alive,
		Host: &api.Host{
			Name:   name,
			Memory: api.Memory{Total: gibs(free) * 2, Budget: gibs(free) + gib, Committed: gib},
			Engines: []api.Engine{
				{Runtime: api.RuntimeLlamaServer, Present: true, Healthy: true},
				{Runtime: api.RuntimeOllama, Present: true, Healthy: true},
			},
		},
	}
}

// pi is a Pi 5 with a Hailo-10H running hailo-ollama, loaded is the model on the device.
func pi(name string, free float64, loaded string) api.Member {
	m := agent(name, free)
	m.Host.Accelerators = []api.Accelerator{{Kind: "hailo", Name: "Hailo-10H", Memory: 8 * gib, Loaded: loaded}}
	m.Host.Engines = append(m.Host.Engines, api.Engine{Runtime: api.RuntimeHailoOllama, Present: true, Healthy: true})
	return m
}

func with(m api.Member, f func(*api.Member)) api.Member { f(&m); return m }

func gguf(bytes int64) Request {
	return Request{
		PlacementRequest: api.PlacementRequest{Source: "hf://Qwen/Qwen2-1.5B-Instruct-GGUF/qwen2-1_5b-instruct-q4_k_m.gguf"},
		Estimate:         api.SizeEstimate{Bytes: bytes, Method: api.SizeHeader},
	}
}

func hailo(model string, bytes int64) Request {
	return Request{
		PlacementRequest: api.PlacementRequest{Source: "hailo://" + model},
		Estimate:         api.SizeEstimate{Bytes: bytes, Method: api.SizeHead, Device: api.DeviceHailo},
	}
}

func byHost(rs []api.Ranked) map[string]api.Ranked {
	m := map[string]api.Ranked{}
	for _, r := range rs {
		m[r.Host] = r
	}
	return m
}

func TestRules(t *testing.T) {
	cases := []struct {
		name    string
		member  api.Member
		req     Request
		verdict api.Verdict
		code    api.Code
		reason  string
	}{
		{"fits", agent("h", 5.2), gguf(gibs(1.9)), api.VerdictFits, "", "fits: needs 1.9 GiB, 5.2 GiB free"},
		{"too big", agent("h", 5.2), gguf(gibs(6.1)), api.VerdictRefused, api.CodeInsufficientMemory, "refused: needs 6.1 GiB, 5.2 GiB free"},
		{"too big, load anyway", agent("h", 5.2), func() Request { r := gguf(gibs(6.1)); r.MemoryCheck = api.MemoryCheckWarn; return r }(),
			api.VerdictFits, "", "load anyway: needs 6.1 GiB, 5.2 GiB free"},
		{"exactly fits", agent("h", 2), gguf(gibs(2)), api.VerdictFits, "", "fits: needs 2.0 GiB, 2.0 GiB free"},
		{"small model", agent("h", 0.75), gguf(300 * mib), api.VerdictFits, "", "fits: needs 300 MiB, 768 MiB free"},
		{"reservations count", with(agent("h", 5.2), func(m *api.Member) { m.Host.Memory.Reserved = gibs(4) }), gguf(gibs(1.9)),
			api.VerdictRefused, api.CodeInsufficientMemory, "refused: needs 1.9 GiB, 1.2 GiB free"},
		{"unsized", agent("h", 5.2), gguf(0), api.VerdictRefused, api.CodeMemoryCheckFailed,
			`refused: size unknown, not loading blind (memory check "warn" loads anyway)`},
		{"unsized, warn", agent("h", 5.2), func() Request { r := gguf(0); r.MemoryCheck = api.MemoryCheckWarn; return r }(),
			api.VerdictFits, "", "fits (unsized, load anyway)"},

		{"suspect", with(agent("h", 5), func(m *api.Member) { m.Liveness = api.Suspect }), gguf(gib), api.VerdictRefused, api.CodeUnreachable, "refused: host is suspect"},
		{"dead", with(agent("h", 5), func(m *api.Member) { m.Liveness = api.Dead }), gguf(gib), api.VerdictRefused, api.CodeUnreachable, "refused: host is dead"},
		{"left", with(agent("h", 5), func(m *api.Member) { m.Liveness = api.Left }), gguf(gib), api.VerdictRefused, api.CodeUnreachable, "refused: host is left"},
		{"unreachable", with(agent("h", 5), func(m *api.Member) { m.Liveness = api.Unreachable; m.Reason = "connection refused" }), gguf(gib),
			api.VerdictRefused, api.CodeUnreachable, "refused: host is unreachable (connection refused)"},
		{"no liveness", with(agent("h", 5), func(m *api.Member) { m.Liveness = "" }), gguf(gib), api.VerdictRefused, api.CodeUnreachable, "refused: host liveness unknown"},
		{"no state yet", with(agent("h", 5), func(m *api.Member) { m.Host = nil }), gguf(gib), api.VerdictRefused, api.CodeUnreachable, "refused: no state from this host yet"},

		{"namespace not allowed", with(agent("h", 5), func(m *api.Member) { m.Host.Namespaces = []string{"team-a"} }),
			func() Request { r := gguf(gib); r.Namespace = "team-b"; return r }(),
			api.VerdictRefused, api.CodeNamespaceNotAllow, "refused: namespace team-b not allowed"},
		{"default namespace not allowed", with(agent("h", 5), func(m *api.Member) { m.Host.Namespaces = []string{"team-a"} }), gguf(gib),
			api.VerdictRefused, api.CodeNamespaceNotAllow, "refused: namespace default not allowed"},
		{"namespace allowed", with(agent("h", 5), func(m *api.Member) { m.Host.Namespaces = []string{"team-a", "team-b"} }),
			func() Request { r := gguf(gib); r.Namespace = "team-b"; return r }(),
			api.VerdictFits, "", "fits: needs 1.0 GiB, 5.0 GiB free"},

		{"no llama-server", with(agent("h", 5), func(m *api.Member) { m.Host.Engines[0].Present = false }), gguf(gib),
			api.VerdictRefused, api.CodeEngineUnavailable, "refused: llama-server is not installed here"},
		{"ollama missing from list", with(agent("h", 5), func(m *api.Member) { m.Host.Engines = m.Host.Engines[:1] }),
			Request{PlacementRequest: api.PlacementRequest{Source: "ollama://qwen2:1.5b"}, Estimate: api.SizeEstimate{Bytes: gib}},
			api.VerdictRefused, api.CodeEngineUnavailable, "refused: ollama is not installed here"},
		{"ollama fits", agent("h", 5), Request{PlacementRequest: api.PlacementRequest{Source: "ollama://qwen2:1.5b"}, Estimate: api.SizeEstimate{Bytes: gib}},
			api.VerdictFits, "", "fits: needs 1.0 GiB, 5.0 GiB free"},

		{"hailo on a host without one", agent("h", 5), hailo("qwen2:1.5b", gibs(1.6)),
			api.VerdictRefused, api.CodeAcceleratorMissing, "refused: hailo:// needs a Hailo-10H"},
		{"hailo-8 is not a hailo-10h", with(pi("h", 5, ""), func(m *api.Member) { m.Host.Accelerators[0].Name = "Hailo-8" }), hailo("qwen2:1.5b", gibs(1.6)),
			api.VerdictRefused, api.CodeAcceleratorMissing, "refused: hailo:// needs a Hailo-10H"},
		{"hailo without hailo-ollama", with(pi("h", 5, ""), func(m *api.Member) { m.Host.Engines = m.Host.Engines[:2] }), hailo("qwen2:1.5b", gibs(1.6)),
			api.VerdictRefused, api.CodeEngineUnavailable, "refused: hailo-ollama is not installed here"},
		{"hailo on ollama", pi("h", 5, ""), func() Request { r := hailo("qwen2:1.5b", gibs(1.6)); r.Runtime = api.RuntimeOllama; return r }(),
			api.VerdictRefused, api.CodeRuntimeMismatch, "refused: hailo:// runs only on hailo-ollama, not ollama"},
		{"gguf on hailo-ollama", pi("h", 5, ""), func() Request { r := gguf(gib); r.Runtime = api.RuntimeHailoOllama; return r }(),
			api.VerdictRefused, api.CodeRuntimeMismatch, "refused: GGUF models run only on llama-server, not hailo-ollama"},
		{"ollama on llama-server", agent("h", 5),
			Request{PlacementRequest: api.PlacementRequest{Source: "ollama://qwen2:1.5b", Runtime: api.RuntimeLlamaServer}, Estimate: api.SizeEstimate{Bytes: gib}},
			api.VerdictRefused, api.CodeRuntimeMismatch, "refused: ollama:// runs only on ollama, not llama-server"},
		{"unknown runtime", agent("h", 5), func() Request { r := gguf(gib); r.Runtime = "vllm"; return r }(),
			api.VerdictRefused, api.CodeRuntimeMismatch, `refused: unknown runtime "vllm"`},
		{"explicit matching runtime", agent("h", 5), func() Request { r := gguf(gib); r.Runtime = api.RuntimeLlamaServer; return r }(),
			api.VerdictFits, "", "fits: needs 1.0 GiB, 5.0 GiB free"},
		{"no source", agent("h", 5), Request{Estimate: api.SizeEstimate{Bytes: gib}},
			api.VerdictRefused, api.CodeInvalidSource, "refused: no model source"},

		{"hailo empty device", pi("h", 0.5, ""), hailo("qwen2:1.5b", gibs(1.6)), api.VerdictFits, "", "fits: needs 1.6 GiB, the Hailo-10H is free"},
		{"hailo occupied", pi("h", 5, "qwen2:1.5b"), hailo("llama3.2:3b", gibs(2.9)), api.VerdictSwap, "", "swap: replaces qwen2:1.5b on the Hailo-10H; it answers until the pull ends, then nothing does for 7–13 s (Hailo's figures)"},
		{"hailo occupied, its last load measured", with(pi("h", 5, "qwen2:1.5b"), func(m *api.Member) { m.Host.Accelerators[0].LastLoadMillis = 9400 }), hailo("llama3.2:3b", gibs(2.9)),
			api.VerdictSwap, "", "swap: replaces qwen2:1.5b on the Hailo-10H; it answers until the pull ends, then nothing does for ≈ 9 s (last load there)"},
		{"hailo already loaded", pi("h", 5, "qwen2:1.5b"), hailo("qwen2:1.5b", gibs(1.6)), api.VerdictFits, "", "fits: qwen2:1.5b is already on the Hailo-10H"},
		{"hailo too big for the device", pi("h", 5, ""), hailo("huge:70b", 9*gib),
			api.VerdictRefused, api.CodeInsufficientMemory, "refused: needs 9.0 GiB, the Hailo-10H has 8.0 GiB"},
		{"hailo unsized", pi("h", 5, ""), hailo("qwen2:1.5b", 0), api.VerdictRefused, api.CodeMemoryCheckFailed,
			`refused: size unknown, not loading blind (memory check "warn" loads anyway)`},
		{"hailo device inferred from runtime", pi("h", 0.5, "x:1b"),
			Request{PlacementRequest: api.PlacementRequest{Source: "hailo://qwen2:1.5b"}, Estimate: api.SizeEstimate{Bytes: gibs(1.6)}},
			api.VerdictSwap, "", "swap: replaces x:1b on the Hailo-10H; it answers until the pull ends, then nothing does for 7–13 s (Hailo's figures)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Rank([]api.Member{c.member}, c.req)
			require.Len(t, got, 1)
			r := got[0]
			assert.Equal(t, c.verdict, r.Verdict)
			assert.Equal(t, c.code, r.Code)
			assert.Equal(t, c.reason, r.Reason)
			assert.Equal(t, "h", r.Host)
			if c.verdict == api.VerdictRefused {
				assert.Zero(t, r.Score)
			} else {
				assert.Positive(t, r.Score)
			}
		})
	}
}

func TestConsolesSkippedEveryAgentOnce(t *testing.T) {
	members := []api.Member{
		{Name: "laptop", Role: api.RoleConsole, Liveness: api.Alive},
		agent("b", 4), agent("a", 4),
		with(agent("c", 4), func(m *api.Member) { m.Liveness = api.Dead }),
	}
	got := Rank(members, gguf(gib))
	var hosts []string
	for _, r := range got {
		hosts = append(hosts, r.Host)
	}
	assert.Equal(t, []string{"a", "b", "c"}, hosts, "equal hosts tie-break by name; refused last")
}

func TestBestFitAndSpread(t *testing.T) {
	members := []api.Member{agent("roomy", 30), agent("tight", 2.5), agent("mid", 8), agent("small", 1)}
	req := gguf(gibs(1.9))
	order := func(rs []api.Ranked) string {
		var s []string
		for _, r := range rs {
			s = append(s, r.Host+"/"+string(r.Verdict))
		}
		return strings.Join(s, " ")
	}
	assert.Equal(t, "tight/fits mid/fits roomy/fits small/refused", order(Rank(members, req)))
	req.Spread = true
	assert.Equal(t, "roomy/fits mid/fits tight/fits small/refused", order(Rank(members, req)))

	r := byHost(Rank(members, req))["tight"]
	assert.Equal(t, gibs(1.9), r.Need)
	assert.Equal(t, gibs(2.5), r.Free)
	assert.Equal(t, api.RuntimeLlamaServer, r.Runtime)
}

func TestPreferencesFilesAndSpeed(t *testing.T) {
	req := gguf(gibs(1.9))
	members := []api.Member{agent("tight", 2.5), agent("roomy", 30)}

	// Files already on the roomy host outweigh the tighter fit elsewhere.
	req.HasFiles = map[string]bool{"roomy": true}
	got := Rank(members, req)
	assert.Equal(t, "roomy", got[0].Host)
	assert.Equal(t, "fits: needs 1.9 GiB, 30.0 GiB free; has the files", got[0].Reason)

	// Measured speed for this model counts too; other models' speed does not.
	req.HasFiles = nil
	members[1].Placements = []api.Placement{{Source: req.Source, Model: "qwen2-1_5b-instruct-q4_k_m", TokensPerS: 41.3}}
	members[0].Placements = []api.Placement{{Source: "hf://other/x.gguf", Model: "x", TokensPerS: 90}}
	got = Rank(members, req)
	assert.Equal(t, "roomy", got[0].Host)
	assert.Equal(t, "fits: needs 1.9 GiB, 30.0 GiB free; 41.3 tok/s measured", got[0].Reason)
	assert.Equal(t, "fits: needs 1.9 GiB, 2.5 GiB free", got[1].Reason)

	// Matching by served model name works when the source differs (e.g. a mirror URL).
	members[1].Placements[0].Source = "https://mirror.lan/qwen2-1_5b-instruct-q4_k_m.gguf"
	assert.Equal(t, "roomy", Rank(members, req)[0].Host)

	// The faster of two hosts with the files wins.
	req.HasFiles = map[string]bool{"roomy": true, "tight": true}
	members[0].Placements = []api.Placement{{Source: req.Source, TokensPerS: 80}}
	got = Rank(members, req)
	assert.Equal(t, "tight", got[0].Host)
}

func TestVerdictBands(t *testing.T) {
	// fits > swap > load anyway > refused, whatever the preferences.
	members := []api.Member{
		pi("swapper", 1, "old:1b"),
		pi("empty", 1, ""),
		with(pi("dead", 1, ""), func(m *api.Member) { m.Liveness = api.Dead }),
	}
	req := hailo("new:1b", gibs(1.6))
	req.HasFiles = map[string]bool{"swapper": true, "dead": true}
	members[0].Placements = []api.Placement{{Source: req.Source, TokensPerS: 30}}
	got := Rank(members, req)
	assert.Equal(t, []string{"empty", "swapper", "dead"}, []string{got[0].Host, got[1].Host, got[2].Host})
	assert.Equal(t, api.VerdictSwap, got[1].Verdict)
	assert.Less(t, got[1].Score, got[0].Score)

	warn := gguf(10 * gib)
	warn.MemoryCheck = api.MemoryCheckWarn
	warn.HasFiles = map[string]bool{"over": true}
	got = Rank([]api.Member{agent("over", 2), agent("ok", 12)}, warn)
	assert.Equal(t, "ok", got[0].Host)
	assert.Equal(t, "load anyway: needs 10.0 GiB, 2.0 GiB free; has the files", got[1].Reason)
}

func TestRankDoesNotModifyInput(t *testing.T) {
	members := []api.Member{agent("b", 4), pi("a", 4, "x:1b")}
	before := fmt.Sprintf("%+v %+v", *members[0].Host, *members[1].Host)
	Rank(members, hailo("y:1b", gib))
	assert.Equal(t, before, fmt.Sprintf("%+v %+v", *members[0].Host, *members[1].Host))
	assert.Equal(t, "b", members[0].Name)
}

// TestReasonsGolden pins the exact text a person reads for a realistic mesh.
func TestReasonsGolden(t *testing.T) {
	members := []api.Member{
		{Name: "laptop", Role: api.RoleConsole, Liveness: api.Alive},
		pi("pi-kitchen", 5.2, "qwen2:1.5b"),
		pi("pi-garage", 5.2, ""),
		agent("linux-box", 5.2),
		with(agent("mac-mini", 22), func(m *api.Member) { m.Host.Namespaces = []string{"team-a"} }),
		with(agent("nas", 12), func(m *api.Member) { m.Liveness = api.Suspect }),
	}
	check := func(req Request, want string) {
		t.Helper()
		var lines []string
		for _, r := range Rank(members, req) {
			code := ""
			if r.Code != "" {
				code = " [" + string(r.Code) + "]"
			}
			lines = append(lines, fmt.Sprintf("%-10s %s%s", r.Host, r.Reason, code))
		}
		assert.Equal(t, strings.TrimSpace(want), strings.Join(lines, "\n"))
	}

	req := gguf(gibs(1.9))
	req.Namespace = "team-b"
	check(req, `
linux-box  fits: needs 1.9 GiB, 5.2 GiB free
pi-garage  fits: needs 1.9 GiB, 5.2 GiB free
pi-kitchen fits: needs 1.9 GiB, 5.2 GiB free
mac-mini   refused: namespace team-b not allowed [NamespaceNotAllowed]
nas        refused: host is suspect [Unreachable]`)

	check(hailo("llama3.2:3b", gibs(2.9)), `
pi-garage  fits: needs 2.9 GiB, the Hailo-10H is free
pi-kitchen swap: replaces qwen2:1.5b on the Hailo-10H; it answers until the pull ends, then nothing does for 7–13 s (Hailo's figures)
linux-box  refused: hailo:// needs a Hailo-10H [AcceleratorMissing]
mac-mini   refused: namespace default not allowed [NamespaceNotAllowed]
nas        refused: host is suspect [Unreachable]`)
}

func TestModelName(t *testing.T) {
	for src, want := range map[string]string{
		"hailo://qwen2:1.5b":             "qwen2:1.5b",
		"ollama://llama3.2:3b":           "llama3.2:3b",
		"/models/Qwen2-1.5B.Q4_K_M.gguf": "Qwen2-1.5B.Q4_K_M",
		"hf://o/r/file.GGUF":             "file",
		"https://mirror.lan/a/b/m.gguf":  "m",
		// As the agent names it: the registry's default tag, the official namespace's short form.
		"ollama://qwen2":              "qwen2:latest",
		"OLLAMA://library/qwen2:0.5b": "qwen2:0.5b",
		"qwen2:1.5b":                  "", // no scheme: refused by the parser, matched by source alone
	} {
		assert.Equal(t, want, modelName(src), src)
	}
}

// BenchmarkRank1000 ranks a 1,000-host mesh of mixed hosts; the target is at most 1 ms per op.
func BenchmarkRank1000(b *testing.B) {
	members := make([]api.Member, 0, 1000)
	for i := range 1000 {
		name := fmt.Sprintf("host-%04d", i)
		var m api.Member
		switch i % 4 {
		case 0:
			m = pi(name, float64(i%16)/2, "")
		case 1:
			m = pi(name, float64(i%16)/2, "qwen2:1.5b")
		case 2:
			m = agent(name, float64(i%64))
		default:
			m = with(agent(name, float64(i%32)), func(m *api.Member) { m.Host.Namespaces = []string{"team-a"} })
		}
		m.Placements = []api.Placement{
			{Source: "hf://o/r/other.gguf", Model: "other", TokensPerS: 20},
			{Source: "hf://Qwen/Qwen2-1.5B-Instruct-GGUF/qwen2-1_5b-instruct-q4_k_m.gguf", TokensPerS: float64(i % 50)},
		}
		members = append(members, m)
	}
	req := gguf(gibs(1.9))
	req.HasFiles = map[string]bool{"host-0002": true, "host-0500": true}
	b.ReportAllocs()
	for b.Loop() {
		if got := Rank(members, req); len(got) != 1000 {
			b.Fatal(len(got))
		}
	}
}

// TestOrderIsSortedAndComplete checks the in-place reordering on a large, varied mesh: every
// agent exactly once, scores never increasing, equal scores by name.
func TestOrderIsSortedAndComplete(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var members []api.Member
	for i := range 300 {
		name := fmt.Sprintf("h%03d", rng.IntN(1000)*1000+i)
		m := agent(name, float64(rng.IntN(8)))
		if rng.IntN(5) == 0 {
			m.Liveness = api.Dead
		}
		if rng.IntN(4) == 0 {
			m.Placements = []api.Placement{{Source: gguf(0).Source, TokensPerS: float64(rng.IntN(40))}}
		}
		members = append(members, m)
	}
	req := gguf(gibs(1.5))
	req.HasFiles = map[string]bool{members[7].Name: true}
	got := Rank(members, req)
	require.Len(t, got, len(members))
	seen := map[string]bool{}
	for i, r := range got {
		assert.False(t, seen[r.Host], "%s twice", r.Host)
		seen[r.Host] = true
		if i > 0 {
			p := got[i-1]
			assert.True(t, p.Score > r.Score || p.Score == r.Score && p.Host < r.Host, "%v before %v", p, r)
		}
	}
}

// Each Pi is ranked against its own hailo-ollama's list: in a mesh of mixed releases a Pi does
// not "fit" a model its daemon does not offer, and one that lists the model under its own
// release's name fits it and says so.
func TestHailoRanksAgainstEachHostsOwnList(t *testing.T) {
	zoo := func(m api.Member, version string, models ...string) api.Member {
		for i := range m.Host.Engines {
			if e := &m.Host.Engines[i]; e.Runtime == api.RuntimeHailoOllama {
				e.Version, e.Models = version, models
			}
		}
		return m
	}
	old := zoo(pi("pi-511", 4, ""), "0.5.1", "deepseek_r1_distill_qwen:1.5b", "llama3.2:3b", "qwen2.5-coder:1.5b", "qwen2.5-instruct:1.5b", "qwen2:1.5b")
	upgraded := zoo(pi("pi-530", 4, "qwen2.5:1.5b"), "5.3.0", "deepseek_r1:1.5b", "llama3.2:1b", "qwen2.5-coder:1.5b", "qwen2.5:1.5b", "qwen2:1.5b", "qwen3:1.7b")
	unknown := pi("pi-new", 4, "") // only its metadata so far: no list to judge by
	members := []api.Member{old, upgraded, unknown}

	rs := byHost(Rank(members, hailo("qwen3:1.7b", gibs(1.6))))
	assert.Equal(t, api.VerdictRefused, rs["pi-511"].Verdict)
	assert.Equal(t, api.CodeNotFound, rs["pi-511"].Code)
	assert.Equal(t, "refused: this host's hailo-ollama (version 0.5.1) does not offer qwen3:1.7b; it offers deepseek_r1_distill_qwen:1.5b, llama3.2:3b, qwen2.5-coder:1.5b, qwen2.5-instruct:1.5b, qwen2:1.5b", rs["pi-511"].Reason)
	assert.Equal(t, api.VerdictSwap, rs["pi-530"].Verdict)
	assert.Equal(t, "swap: replaces qwen2.5:1.5b on the Hailo-10H; it answers until the pull ends, then nothing does for 7–13 s (Hailo's figures); hailo-ollama 5.3.0 degrades answers after a swap until it restarts", rs["pi-530"].Reason)
	assert.Equal(t, api.VerdictFits, rs["pi-new"].Verdict)

	// A restored placement's old name: the upgraded Pi has it on the device already, as qwen2.5:1.5b.
	rs = byHost(Rank(members, hailo("qwen2.5-instruct:1.5b", gibs(1.6))))
	assert.Equal(t, api.VerdictFits, rs["pi-511"].Verdict)
	assert.Equal(t, "fits: needs 1.6 GiB, the Hailo-10H is free", rs["pi-511"].Reason)
	assert.Equal(t, api.VerdictFits, rs["pi-530"].Verdict)
	assert.Equal(t, "fits: qwen2.5:1.5b is already on the Hailo-10H; runs as qwen2.5:1.5b, this hailo-ollama's name for it", rs["pi-530"].Reason)

	rs = byHost(Rank(members, hailo("llama3.2:3b", gibs(3.1))))
	assert.Equal(t, api.VerdictFits, rs["pi-511"].Verdict)
	assert.Equal(t, api.VerdictRefused, rs["pi-530"].Verdict, "5.3.0 no longer offers llama3.2:3b")
}

// A context past the one the model was trained for is refused on every host, as every agent
// refuses it: it would "fit" while the engine caps each request at the trained context.
// A size error with its own cause (no such model) is the capable host's refusal.
func TestContextPastTrainingAndSizeErrors(t *testing.T) {
	req := gguf(3 * gib)
	req.Estimate.TrainContext = 32768
	req.Context = 1 << 20
	for _, r := range Rank([]api.Member{agent("a", 10), agent("b", 20)}, req) {
		assert.Equal(t, api.VerdictRefused, r.Verdict, r.Host)
		assert.Equal(t, api.CodeContextLimit, r.Code, r.Host)
		assert.Equal(t, "refused: trained for a 32768-token context, 1048576 asked", r.Reason)
	}
	req.Context = 32768
	assert.Equal(t, api.VerdictFits, Rank([]api.Member{agent("a", 10)}, req)[0].Verdict, "up to the trained context fits")

	missing := gguf(0)
	missing.SizeErr = &api.Error{Code: api.CodeNotFound, Message: "model file /x.gguf does not exist"}
	r := Rank([]api.Member{agent("a", 10)}, missing)[0]
	assert.Equal(t, api.CodeNotFound, r.Code)
	assert.Equal(t, "refused: model file /x.gguf does not exist", r.Reason)
	missing.SizeErr.Code = api.CodeMemoryCheckFailed
	assert.Contains(t, Rank([]api.Member{agent("a", 10)}, missing)[0].Reason, "size unknown, not loading blind", "a size that could not be read stays that")
}

// Ranked again after a placement, the host it runs on says so, with the placement, rather than
// "fits" as a place for another copy; a failed, evicted or stopping placement, another
// namespace's, or a split's part there does not count.
func TestAlreadyRunsHere(t *testing.T) {
	req := gguf(gibs(1.9))
	running := api.Placement{ID: "p-1", Namespace: api.DefaultNamespace, Source: req.Source, Model: "qwen2-1_5b-instruct-q4_k_m", State: api.StateReady}
	members := []api.Member{agent("tight", 2.5), agent("roomy", 30)}
	members[0].Placements = []api.Placement{running}
	got := byHost(Rank(members, req))
	assert.Equal(t, "fits: already runs here (p-1, ready)", got["tight"].Reason)
	assert.Equal(t, "p-1", got["tight"].Runs)
	assert.Equal(t, "fits: needs 1.9 GiB, 30.0 GiB free", got["roomy"].Reason)
	assert.Empty(t, got["roomy"].Runs)

	for _, p := range []api.Placement{
		edited(running, func(p *api.Placement) { p.State = api.StateFailed }),
		edited(running, func(p *api.Placement) { p.State = api.StateEvicted }),
		edited(running, func(p *api.Placement) { p.State = api.StateStopping }),
		edited(running, func(p *api.Placement) { p.Namespace = "team" }),
		edited(running, func(p *api.Placement) { p.Part = &api.SplitPart{Main: "roomy"} }),
	} {
		members[0].Placements = []api.Placement{p}
		r := byHost(Rank(members, req))["tight"]
		assert.Equal(t, "fits: needs 1.9 GiB, 2.5 GiB free", r.Reason, "%+v", p)
		assert.Empty(t, r.Runs)
	}

	// On a Hailo-10H, the model the device holds for this namespace's placement.
	pis := []api.Member{pi("pi", 1, "qwen2:1.5b")}
	pis[0].Placements = []api.Placement{{ID: "p-2", Namespace: api.DefaultNamespace, Source: "hailo://qwen2:1.5b", Model: "qwen2:1.5b", State: api.StateReady}}
	r := Rank(pis, hailo("qwen2:1.5b", gibs(1.6)))[0]
	assert.Equal(t, api.VerdictFits, r.Verdict)
	assert.Equal(t, "fits: already runs here (p-2, ready)", r.Reason)
}

// edited is p changed by f.
func edited(p api.Placement, f func(*api.Placement)) api.Placement { f(&p); return p }

// A request that wants no host on battery leaves such a host out, with the reason, and ranks
// the others as before; a request that does not care ranks it as any other.
func TestNotOnBattery(t *testing.T) {
	unplugged := with(agent("laptop", 12), func(m *api.Member) {
		h := *m.Host
		h.OnBattery = true
		m.Host = &h
	})
	members := []api.Member{unplugged, agent("desk", 4)}
	req := gguf(gibs(1.9))
	got := Rank(members, req)
	require.Len(t, got, 2)
	assert.Equal(t, api.VerdictFits, byHost(got)["laptop"].Verdict, "no constraint: a host on battery fits")

	req.NotOnBattery = true
	got = Rank(members, req)
	require.Len(t, got, 2)
	assert.Equal(t, "desk", got[0].Host)
	assert.Equal(t, api.VerdictFits, got[0].Verdict)
	laptop := byHost(got)["laptop"]
	assert.Equal(t, api.VerdictRefused, laptop.Verdict)
	assert.Equal(t, api.CodeOnBattery, laptop.Code)
	assert.Equal(t, "refused: on battery", laptop.Reason)
}
