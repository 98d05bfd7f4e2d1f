package rank

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
)

// SplitRequest is a request for one model across several hosts (llama.cpp RPC): the placement
// request sized (Estimate with its Layers), and what bounds the plan.
type SplitRequest struct {
	Request
	// Hosts, when set, are the only hosts the plan may use.
	Hosts []string
	// Main, when set, is the main host (the agent the split is sent to); otherwise the plan
	// prefers one that holds the file, then the one with the most room.
	Main string
	// RTT is the round trip from the main to each host, as measured; a host not in it is not
	// judged on it, and the speed estimate says so.
	RTT map[string]time.Duration
	// MaxRTT leaves out hosts farther than this; 0 is DefaultMaxRTT.
	MaxRTT time.Duration
	// Headroom is the fraction of each member's free budget the plan leaves free; 0 is
	// DefaultHeadroom.
	Headroom float64
}

// Bounds of a split plan.
const (
	// DefaultMaxRTT: llama.cpp RPC makes a few round trips per device per token, so a link
	// far slower than a LAN's costs more than the split gains. The round trip measured is the
	// gossip probe's, which holds the peer's scheduling too: on a busy host one reaches tens of
	// milliseconds even on loopback (a smoothed mean once read 51 ms on two loaded cores under
	// the race detector), so the view gives the lowest of the last probes. The bound leaves out
	// only what would make a split crawl; the speed estimate shows the cost of the rest.
	DefaultMaxRTT = api.DefaultSplitRTTMillis * time.Millisecond
	// DefaultHeadroom of each member's free budget is left free.
	DefaultHeadroom = 0.1
	// WorkerOverhead is an rpc-server process beyond the tensors it holds (measured: ~20 MiB
	// of resident memory on a CPU worker; counted generously).
	WorkerOverhead int64 = 64 << 20
	// MaxMembers is llama.cpp's bound on RPC servers of one llama-server (GGML_RPC_MAX_SERVERS).
	MaxMembers = 16
)

// RTTs are the measured round trips to members, as a view gives them (api.Member.RTTMillis),
// for SplitRequest.RTT.
func RTTs(members []api.Member) map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, m := range members {
		if m.RTTMillis > 0 {
			out[m.Name] = time.Duration(m.RTTMillis * float64(time.Millisecond))
		}
	}
	return out
}

// candidate is a host that may take part, and how many layers it can hold.
type candidate struct {
	m        *api.Member
	free     int64
	usable   int64
	capacity int // layers it can hold after its fixed costs
	files    bool
	speed    float64
	rtt      time.Duration
	llama    bool // can be the main: runs llama-server
	output   bool // holds the output layer (outputOn)
}

// Split plans req across the fewest hosts of members that hold the model with headroom: every
// member runs an rpc-server for its share of the layers, the main also runs llama-server. The
// plan says each member's arithmetic, the expected speed and what it rests on, and why each other
// host was left out. Pure, like Rank.
func Split(members []api.Member, req SplitRequest) api.SplitPlan {
	est := req.Estimate
	plan := api.SplitPlan{Layers: est.Layers, MaxRTTMillis: float64(req.MaxRTT) / float64(time.Millisecond)}
	maxRTT := cmp.Or(req.MaxRTT, DefaultMaxRTT)
	headroom := req.Headroom
	if headroom <= 0 || headroom >= 1 {
		headroom = DefaultHeadroom
	}
	_, runtime, mismatch := classify(req.Request)
	switch {
	case mismatch.Code != "":
		plan.Reason = mismatch.Reason
		return plan
	case runtime != api.RuntimeLlamaServer:
		plan.Reason = "refused: only GGUF models on llama-server split across hosts, not " + string(runtime)
		return plan
	case est.Bytes <= 0 || est.Layers <= 0:
		plan.Reason = "refused: the model's size and layer count are unknown, so it cannot be split (the GGUF header was not read)"
		return plan
	}
	model := req.Name
	if model == "" {
		model = modelName(req.Source)
	}
	ns := cmp.Or(req.Namespace, api.DefaultNamespace)
	// The token embeddings stay with llama-server on the main; the output layer goes with the
	// last device (outputOn); the repeating layers and their KV cache are what is divided.
	in, out := Ends(est)
	perLayer := ceilDiv(est.Weights-in-out+est.KV, int64(est.Layers))
	fixed := est.Compute + WorkerOverhead
	mainExtra := mainNeed(est)

	var cands []*candidate
	for i := range members {
		m := &members[i]
		if m.Role == api.RoleConsole {
			continue
		}
		leave := func(code api.Code, why string) {
			plan.Left = append(plan.Left, api.SplitLeftOut{Host: m.Name, Code: code, Reason: why})
		}
		h := m.Host
		switch {
		case len(req.Hosts) > 0 && !slices.Contains(req.Hosts, m.Name):
			leave("", "not among the hosts asked for")
		case m.Liveness != api.Alive:
			leave(api.CodeUnreachable, "host is "+cmp.Or(string(m.Liveness), "of unknown liveness"))
		case h == nil:
			leave(api.CodeUnreachable, "no state from this host yet")
		case !nsAllowed(h.Namespaces, ns):
			leave(api.CodeNamespaceNotAllow, "namespace "+ns+" not allowed")
		case h.RPCProtocol() == "":
			leave(api.CodeEngineUnavailable, "no RPC runtime: ggml-rpc-server is not installed here")
		case req.RTT[m.Name] > maxRTT:
			leave(api.CodeUnreachable, fmt.Sprintf("RTT %s over the bound of %s", req.RTT[m.Name].Round(10*time.Microsecond), maxRTT))
		default:
			free := h.Memory.Free()
			c := &candidate{m: m, free: free, usable: int64(float64(free) * (1 - headroom)),
				files: req.HasFiles[m.Name], speed: measuredSpeed(m.Placements, req.Source, model),
				rtt: req.RTT[m.Name], llama: enginePresent(h.Engines, api.RuntimeLlamaServer)}
			cands = append(cands, c)
		}
	}
	main := pickMain(cands, req.Main)
	if main == nil {
		plan.Reason = "refused: no host can be the main: none that could take part runs llama-server"
		if req.Main != "" {
			plan.Reason = "refused: " + req.Main + " cannot be the main: it runs no llama-server or RPC runtime, or is not alive"
		}
		return plan
	}
	plan.Main, plan.Protocol = main.m.Name, main.m.Host.RPCProtocol()
	others := cands[:0:0]
	for _, c := range cands {
		if c == main {
			continue
		}
		if v := c.m.Host.RPCProtocol(); v != plan.Protocol {
			plan.Left = append(plan.Left, api.SplitLeftOut{Host: c.m.Name, Code: api.CodeEngineUnavailable,
				Reason: "RPC protocol v" + v + " differs from the main's v" + plan.Protocol})
			continue
		}
		others = append(others, c)
	}
	for _, c := range append([]*candidate{main}, others...) {
		room := c.usable - fixed
		if c == main {
			room -= mainExtra
		}
		c.capacity = int(max(room, 0) / perLayer)
	}
	slices.SortStableFunc(others, func(a, b *candidate) int {
		return cmp.Or(cmp.Compare(b.capacity, a.capacity), strings.Compare(a.m.Name, b.m.Name))
	})
	outputOn(main, others, out, perLayer)
	// The main may hold no layer (then it runs no rpc-server), but it must hold llama-server.
	if main.usable < mainExtra {
		plan.Reason = fmt.Sprintf("refused: the main %s needs %s for llama-server, %s free with headroom",
			main.m.Name, api.FormatBytes(mainExtra), api.FormatBytes(main.usable))
		plan.Members = arithmetic([]*candidate{main}, est, nil)
		return plan
	}
	chosen := []*candidate{main}
	held := main.capacity
	for _, c := range others {
		if c.capacity == 0 {
			plan.Left = append(plan.Left, api.SplitLeftOut{Host: c.m.Name, Code: api.CodeInsufficientMemory,
				Reason: fmt.Sprintf("not enough budget: %s free with headroom, a layer needs %s beyond %s fixed", api.FormatBytes(c.usable), api.FormatBytes(perLayer), api.FormatBytes(fixed))})
			continue
		}
		if held >= est.Layers && len(chosen) >= 2 || len(chosen) == MaxMembers {
			plan.Left = append(plan.Left, api.SplitLeftOut{Host: c.m.Name, Reason: "not needed: " + strconv.Itoa(len(chosen)) + " hosts hold the model"})
			continue
		}
		chosen = append(chosen, c)
		held += c.capacity
	}
	if held < est.Layers || len(chosen) < 2 {
		plan.Members = arithmetic(chosen, est, nil)
		plan.Reason = fmt.Sprintf("refused: the %d hosts that can take part hold %d of the model's %d layers (%s a layer, %s fixed per host, %.0f%% of each budget left free)",
			len(chosen), held, est.Layers, api.FormatBytes(perLayer), api.FormatBytes(fixed), headroom*100)
		if len(chosen) < 2 {
			plan.Reason = "refused: no other host can take part"
		}
		return plan
	}
	plan.Members = arithmetic(chosen, est, withOutput(chosen, layersFor(chosen, est.Layers)))
	plan.Fits = true
	names := make([]string, len(plan.Members))
	for i, m := range plan.Members {
		names[i] = m.Host + " " + strconv.Itoa(m.Layers)
		if m.Output {
			names[i] += " and the output layer"
		}
	}
	plan.Reason = fmt.Sprintf("fits across %d hosts, main %s; layers: %s of %d", len(chosen), plan.Main, strings.Join(names, ", "), est.Layers)
	plan.TokensPerS, plan.Basis = speedOf(plan.Members, est.Layers)
	return plan
}

// pickMain is the named main when it can be one, or the best: holds the file, then the most
// room, then the name.
func pickMain(cands []*candidate, named string) *candidate {
	var best *candidate
	for _, c := range cands {
		if !c.llama {
			continue
		}
		if named != "" {
			if c.m.Name == named {
				return c
			}
			continue
		}
		if best == nil || c.files && !best.files || c.files == best.files && c.free > best.free {
			best = c
		}
	}
	return best
}

// outputOn gives the output layer (out bytes) to the main when it can hold it beside a layer
// of its own, so the logits of each token stay on the host that reads them; otherwise to the
// other member with the most room. That member's capacity is what is left beside it.
func outputOn(main *candidate, others []*candidate, out, perLayer int64) {
	if out == 0 {
		return
	}
	holder := main
	if room := int64(main.capacity)*perLayer - out; room < perLayer && len(others) > 0 {
		main.capacity, holder = 0, others[0]
	}
	holder.output = true
	holder.capacity = int(max(int64(holder.capacity)*perLayer-out, 0) / perLayer)
}

// withOutput makes sure the member holding the output layer holds a layer too (llama.cpp
// gives the output to the device of the last layers), taking one from the member with most.
func withOutput(chosen []*candidate, layers []int) []int {
	for i, c := range chosen {
		if !c.output || layers[i] > 0 {
			continue
		}
		most := 0
		for j := range layers {
			if layers[j] > layers[most] {
				most = j
			}
		}
		if layers[most] > 1 {
			layers[i]++
			layers[most]--
		}
	}
	return layers
}

// Ends are the weights outside the repeating layers: the token embeddings and the output
// layer; both 0 when unknown, or when the figures cannot be right.
func Ends(est api.SizeEstimate) (in, out int64) {
	in, out = est.InputWeights, est.OutputWeights
	if in < 0 || out < 0 || in+out >= est.Weights {
		return 0, 0
	}
	return in, out
}

// mainNeed is what llama-server itself holds on the main: its compute buffer, overhead and the
// token embeddings, which stay in its memory. No host prompt cache: llama-server saves a
// sequence's KV cache there whenever a new prompt takes its slot, and a split's KV lives on its
// members, so each new prompt would first pull the last one's KV over the LAN (a long chat on a
// large model: gigabytes); the slot's own KV still serves a conversation that goes on.
func mainNeed(est api.SizeEstimate) int64 {
	in, _ := Ends(est)
	return est.Compute + est.Overhead + in
}

// layersFor divides layers among the chosen in proportion to what each can hold (each within
// it), the remainder to the largest fractions.
func layersFor(chosen []*candidate, layers int) []int {
	total := 0
	for _, c := range chosen {
		total += c.capacity
	}
	out := make([]int, len(chosen))
	rest := make([]int, len(chosen)) // the fraction's numerator, for the remainder
	given := 0
	for i, c := range chosen {
		out[i] = layers * c.capacity / total
		rest[i] = layers * c.capacity % total
		given += out[i]
	}
	order := make([]int, len(chosen))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(rest[b], rest[a]) })
	for given < layers {
		for _, i := range order {
			if given < layers && out[i] < chosen[i].capacity {
				out[i]++
				given++
			}
		}
	}
	return out
}

// arithmetic is each member's share; layers nil shows what each could hold at most.
func arithmetic(chosen []*candidate, est api.SizeEstimate, layers []int) []api.SplitMember {
	in, out := Ends(est)
	members := make([]api.SplitMember, len(chosen))
	for i, c := range chosen {
		l := c.capacity
		if layers != nil {
			l = layers[i]
		}
		m := api.SplitMember{Host: c.m.Name, Main: i == 0, Layers: l, Free: c.free, TokensPerS: c.speed,
			RTTMillis: float64(c.rtt) / float64(time.Millisecond)}
		if est.Layers > 0 {
			m.Share = float64(l) / float64(est.Layers)
			m.Weights = (est.Weights - in - out) * int64(l) / int64(est.Layers)
			m.KV = est.KV * int64(l) / int64(est.Layers)
		}
		if c.output && l > 0 {
			m.Output, m.Weights = true, m.Weights+out
		}
		if l > 0 {
			m.Compute, m.Overhead = est.Compute, WorkerOverhead
			m.Need = m.Weights + m.KV + m.Compute + m.Overhead
		}
		if i == 0 {
			m.MainNeed = mainNeed(est)
		}
		members[i] = m
	}
	if out > 0 && layers != nil && !slices.ContainsFunc(members, func(m api.SplitMember) bool { return m.Output }) {
		// No member could take the output beside its layers (outputOn): it goes with the last
		// device all the same, and that member's own admission judges it.
		last := -1
		for i, m := range members {
			if m.Layers > 0 {
				last = i
			}
		}
		if last >= 0 {
			m := &members[last]
			m.Output, m.Weights, m.Need = true, m.Weights+out, m.Need+out
		}
	}
	return members
}

// speedOf is the expected tokens/s: each member's layers take their share of its measured
// time a token, and each remote member adds its round trips. Unknown (0) when a member holding
// layers has no measured speed for the model; basis says what the figure rests on either way.
func speedOf(ms []api.SplitMember, layers int) (float64, string) {
	var perToken float64 // seconds
	var rests, missing, links []string
	for _, m := range ms {
		if m.Layers == 0 {
			continue
		}
		if m.TokensPerS > 0 {
			perToken += float64(m.Layers) / float64(layers) / m.TokensPerS
			rests = append(rests, fmt.Sprintf("%s %.1f tok/s measured", m.Host, m.TokensPerS))
		} else {
			missing = append(missing, m.Host)
		}
		if m.Main {
			continue
		}
		if m.RTTMillis > 0 {
			// One round trip a token: llama.cpp sends a token's commands to a member (the
			// inputs' SET_TENSOR, GRAPH_COMPUTE) without waiting, and only the read of the
			// result (GET_TENSOR) waits for its answer (RPC v5, strace: BENCHMARKS.md, "What
			// crosses the channel").
			perToken += m.RTTMillis / 1000
			links = append(links, fmt.Sprintf("%s %.2f ms RTT", m.Host, m.RTTMillis))
		} else {
			links = append(links, m.Host+" RTT not measured")
		}
	}
	basis := "slowest member and links set the speed"
	if len(rests) > 0 {
		basis += "; " + strings.Join(rests, ", ")
	}
	if len(missing) > 0 {
		basis += "; no measured speed for this model on " + strings.Join(missing, ", ")
	}
	if len(links) > 0 {
		basis += "; " + strings.Join(links, ", ") + " (one round trip a token each)"
	}
	if len(missing) > 0 || perToken <= 0 {
		return 0, basis
	}
	return 1 / perToken, basis
}

func ceilDiv(a, b int64) int64 {
	if b <= 0 {
		return a
	}
	return (a + b - 1) / b
}
