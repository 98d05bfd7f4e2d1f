// Package rank previews where a model can go: every host of a mesh view gets a verdict (fits,
// swap, refused), a human reason that shows the arithmetic, and a score. It is a pure function
// of the view and the request, so the console can re-rank on every gossip update; the chosen
// agent's admission stays authoritative.
package rank

import (
	"cmp"
	"slices"
	"strconv"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/source"
	"github.com/llmkube/mesh/internal/hailozoo"
)

// Request is a placement request plus what the console learned while preparing it.
type Request struct {
	api.PlacementRequest
	// Estimate is an agent's answer to POST /v1/estimate; Bytes 0 means the size is unknown.
	Estimate api.SizeEstimate
	// SizeErr is why the size is unknown, as the sizing agent refused it. A cause other than
	// the size itself (no such model: NotFound) is every capable host's refusal, in its words.
	SizeErr *api.Error
	// Spread places on the host with the most memory left instead of the tightest fit.
	Spread bool
	// HasFiles names the hosts that already hold the model's files (no download).
	HasFiles map[string]bool
}

// The Hailo-10H is the only device hailo:// models run on.
const (
	hailoKind = "hailo"
	hailoName = "Hailo-10H"
)

// Scores: the verdict decides the band, preferences order hosts within it. Weights inside a
// band add up to less than one, so no preference lifts a host into a better band.
const (
	bandFits       = 3.0
	bandSwap       = 2.0
	bandLoadAnyway = 1.0 // fits only because the operator said "warn": unsized or over budget

	weightFiles  = 0.4  // no download: often gigabytes
	weightPeer   = 0.2  // a copy from a peer over the LAN, not from the internet
	weightSpeed  = 0.35 // measured tokens/s for this model, relative to the fastest host
	weightMemory = 0.24 // best fit (or spread)
)

// Rank gives every agent member exactly one entry, best first; consoles are skipped. Ties are
// broken by host name, so the order is deterministic.
func Rank(members []api.Member, req Request) []api.Ranked {
	native, runtime, mismatch := classify(req)
	model := req.Name
	if model == "" {
		model = modelName(req.Source)
	}
	ns := req.Namespace
	if ns == "" {
		ns = api.DefaultNamespace
	}
	// Text shared by many hosts is built once: Rank runs on every gossip update.
	nsRefusal := "refused: namespace " + ns + " not allowed"
	needStr := api.FormatBytes(req.Estimate.Bytes)
	// Past the context the model was trained for, the engine caps every request there while
	// holding the memory of the whole: every agent refuses it (ContextTooLong), so every host
	// does here.
	tooLong := ""
	if tc := req.Estimate.TrainContext; tc > 0 && req.Context > tc {
		tooLong = "refused: trained for a " + strconv.Itoa(tc) + "-token context, " + strconv.Itoa(req.Context) + " asked"
	}

	holders := heldBy(members, req.SHA256)
	out := make([]api.Ranked, 0, len(members))
	speeds := make([]float64, 0, len(members))
	var fastest float64
	for i := range members {
		m := &members[i]
		if m.Role == api.RoleConsole {
			continue
		}
		r := api.Ranked{Host: m.Name, Runtime: runtime}
		lacks := ""
		if m.Host != nil {
			lacks = api.MissingLabel(m.Host.Labels, req.Labels)
		}
		switch {
		case m.Liveness != api.Alive:
			why := "refused: host is " + string(m.Liveness)
			if m.Liveness == "" {
				why = "refused: host liveness unknown"
			}
			if m.Reason != "" {
				why += " (" + m.Reason + ")"
			}
			refuse(&r, api.CodeUnreachable, why)
		case m.Host == nil:
			refuse(&r, api.CodeUnreachable, "refused: no state from this host yet")
		case mismatch.Code != "":
			refuse(&r, mismatch.Code, mismatch.Reason)
		case tooLong != "":
			refuse(&r, api.CodeContextLimit, tooLong)
		case !nsAllowed(m.Host.Namespaces, ns):
			refuse(&r, api.CodeNamespaceNotAllow, nsRefusal)
		case lacks != "":
			refuse(&r, api.CodeBadRequest, "refused: no label "+lacks)
		case req.NotOnBattery && m.Host.OnBattery:
			refuse(&r, api.CodeOnBattery, "refused: on battery")
		default:
			judge(&r, m.Host, native, runtime, model, needStr, req)
			if r.Verdict != api.VerdictRefused {
				runsHere(&r, m.Placements, ns, req.Source, model)
			}
		}
		speed := 0.0
		if r.Verdict != api.VerdictRefused {
			speed = measuredSpeed(m.Placements, req.Source, model)
			fastest = max(fastest, speed)
			files := req.HasFiles[m.Name] || slices.Contains(holders, m.Name)
			peer := ""
			if !files && len(holders) > 0 {
				peer = holders[0] // over the LAN, not the internet: counts, less than no copy
				r.Score += weightPeer
			}
			if files {
				r.Score += weightFiles
			}
			if files || peer != "" || speed > 0 {
				var buf [128]byte
				b := append(buf[:0], r.Reason...)
				if files {
					b = append(b, "; has the files"...)
				}
				if peer != "" {
					b = append(append(append(b, "; files from "...), peer...), " over the LAN"...)
				}
				if speed > 0 {
					b = append(strconv.AppendFloat(append(b, "; "...), speed, 'f', 1, 64), " tok/s measured"...)
				}
				r.Reason = string(b)
			}
		}
		out = append(out, r)
		speeds = append(speeds, speed)
	}
	if fastest > 0 {
		for i := range out {
			out[i].Score += weightSpeed * speeds[i] / fastest
		}
	}
	// Sort indices, not the structs: moving strings around would cost a write barrier each.
	order := make([]int32, len(out))
	for i := range order {
		order[i] = int32(i)
	}
	slices.SortFunc(order, func(a, b int32) int {
		ra, rb := &out[a], &out[b]
		if c := cmp.Compare(rb.Score, ra.Score); c != 0 {
			return c
		}
		return strings.Compare(ra.Host, rb.Host)
	})
	permute(out, order)
	return out
}

// permute reorders rs in place so that rs[i] becomes the old rs[order[i]], following each
// cycle once; it consumes order.
func permute(rs []api.Ranked, order []int32) {
	for start := range rs {
		if order[start] < 0 {
			continue
		}
		tmp := rs[start]
		j := start
		for {
			k := int(order[j])
			order[j] = -1
			if k == start {
				rs[j] = tmp
				break
			}
			rs[j] = rs[k]
			j = k
		}
	}
}

// classify infers the runtime the source runs on (source.RuntimeOf) and checks the request's
// runtime against it, with the agent/api/source rules: hailo:// only on hailo-ollama, ollama://
// only on Ollama, GGUF only on llama-server. It returns the source's own runtime, the runtime
// asked for (the source's when none is) and the problem, if any, which is the same for every host.
func classify(req Request) (native, rt api.Runtime, bad api.Ranked) {
	src := strings.TrimSpace(req.Source)
	if src == "" {
		return api.RuntimeLlamaServer, req.Runtime, api.Ranked{Code: api.CodeInvalidSource, Reason: "refused: no model source"}
	}
	native = source.RuntimeOf(src)
	rt = req.Runtime
	if rt == "" {
		return native, native, bad
	}
	if !rt.Valid() {
		bad = api.Ranked{Code: api.CodeRuntimeMismatch, Reason: "refused: unknown runtime " + strconv.Quote(string(rt))}
	} else if rt != native {
		what := "GGUF models run"
		switch native {
		case api.RuntimeHailoOllama:
			what = "hailo:// runs"
		case api.RuntimeOllama:
			what = "ollama:// runs"
		}
		bad = api.Ranked{Code: api.CodeRuntimeMismatch, Reason: "refused: " + what + " only on " + string(native) + ", not " + string(rt)}
	}
	return native, rt, bad
}

// judge decides a live host that allows the namespace: hardware, engine, then memory.
func judge(r *api.Ranked, h *api.Host, native, rt api.Runtime, model, needStr string, req Request) {
	var hailo *api.Accelerator
	for i := range h.Accelerators {
		if a := &h.Accelerators[i]; a.Kind == hailoKind && a.Name == hailoName {
			hailo = a
			break
		}
	}
	if native == api.RuntimeHailoOllama && hailo == nil {
		refuse(r, api.CodeAcceleratorMissing, "refused: hailo:// needs a Hailo-10H")
		return
	}
	if !enginePresent(h.Engines, rt) {
		refuse(r, api.CodeEngineUnavailable, "refused: "+string(rt)+" is not installed here")
		return
	}
	servedAs := ""
	if rt == api.RuntimeHailoOllama {
		var ok bool
		if servedAs, ok = hailoOffers(r, h.Engines, req.Source); !ok {
			return
		}
	}
	defer func() {
		if servedAs != "" && r.Verdict != api.VerdictRefused {
			r.Reason += "; runs as " + servedAs + ", this hailo-ollama's name for it"
		}
	}()
	device := req.Estimate.Device
	if device == "" {
		device = api.DeviceHost
		if rt == api.RuntimeHailoOllama {
			device = api.DeviceHailo
		}
	}
	need := req.Estimate.Bytes
	r.Need = need
	warn := req.MemoryCheck == api.MemoryCheckWarn
	if need <= 0 {
		r.Need = 0
		if e := req.SizeErr; e != nil && e.Code != "" && e.Code != api.CodeMemoryCheckFailed {
			refuse(r, e.Code, "refused: "+e.Message)
			return
		}
		if !warn {
			refuse(r, api.CodeMemoryCheckFailed, `refused: size unknown, not loading blind (memory check "warn" loads anyway)`)
			return
		}
		r.Verdict, r.Score, r.Reason = api.VerdictFits, bandLoadAnyway, "fits (unsized, load anyway)"
		return
	}

	if device == api.DeviceHailo {
		if hailo == nil {
			refuse(r, api.CodeAcceleratorMissing, "refused: needs a Hailo-10H")
			return
		}
		// One model at a time in the device's own memory: the host's free memory is irrelevant.
		r.Free = hailo.Memory
		if hailo.Memory > 0 && need > hailo.Memory {
			refuse(r, api.CodeInsufficientMemory, "refused: needs "+needStr+", the Hailo-10H has "+api.FormatBytes(hailo.Memory))
			return
		}
		switch hailo.Loaded {
		case "":
			r.Verdict, r.Score = api.VerdictFits, bandFits+weightMemory*fitTerm(hailo.Memory-need, req.Spread)
			r.Reason = "fits: needs " + needStr + ", the Hailo-10H is free"
		case model, servedAs:
			r.Verdict, r.Score = api.VerdictFits, bandFits+weightMemory
			r.Reason = "fits: " + hailo.Loaded + " is already on the Hailo-10H"
		default:
			r.Verdict, r.Score = api.VerdictSwap, bandSwap+weightMemory*fitTerm(hailo.Memory-need, req.Spread)
			r.Reason = "swap: replaces " + hailo.Loaded + " on the Hailo-10H; " + swapSilence(*hailo)
			for _, e := range h.Engines {
				if e.Runtime == api.RuntimeHailoOllama && hailozoo.ReleaseOf(e.Version).SwapDefect() {
					// The agent's own estimate says whether it restarts the daemon for it.
					r.Reason += "; hailo-ollama " + e.Version + " degrades answers after a swap until it restarts"
				}
			}
		}
		return
	}

	free := h.Memory.Free()
	r.Free = free
	var buf [64]byte
	arithmetic := func(verdict string) string {
		b := append(buf[:0], verdict...)
		b = append(b, ": needs "...)
		b = append(b, needStr...)
		b = append(b, ", "...)
		b = api.AppendBytes(b, free)
		return string(append(b, " free"...))
	}
	if need > free {
		if warn {
			r.Verdict, r.Score, r.Reason = api.VerdictFits, bandLoadAnyway, arithmetic("load anyway")
			return
		}
		refuse(r, api.CodeInsufficientMemory, arithmetic("refused"))
		return
	}
	r.Verdict, r.Score, r.Reason = api.VerdictFits, bandFits+weightMemory*fitTerm(free-need, req.Spread), arithmetic("fits")
}

// fitTerm maps the memory left after placing to [0, 1]: best fit prefers little left, spread
// prefers much. It depends on absolute bytes so hosts compare without a second pass.
func fitTerm(left int64, spread bool) float64 {
	left = max(left, 0) // a device of unknown size
	gib := float64(left) / (1 << 30)
	tight := 1 / (1 + gib)
	if spread {
		return 1 - tight
	}
	return tight
}

func refuse(r *api.Ranked, code api.Code, reason string) {
	r.Verdict, r.Code, r.Reason, r.Score = api.VerdictRefused, code, reason, 0
}

func nsAllowed(allow []string, ns string) bool {
	return len(allow) == 0 || slices.Contains(allow, ns)
}

// hailoOffers checks the model against the host's own hailo-ollama list (/hailo/v1/list, which
// the host's state document carries as the engine's Models): each release offers its own zoo
// under its own names. A model the list names under another release's name (a known rename)
// is offered, and servedAs says the name it runs by; one it does not name is refused. A host
// whose list is not known yet (only its metadata arrived) is not judged on it.
func hailoOffers(r *api.Ranked, es []api.Engine, raw string) (servedAs string, ok bool) {
	src, err := source.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", true // the agent refuses a bad source; nothing to check against a list
	}
	ref := src.Ref()
	for _, e := range es {
		if e.Runtime != api.RuntimeHailoOllama || len(e.Models) == 0 {
			continue
		}
		name, offered := hailozoo.Offers(e.Models, ref)
		if !offered {
			version := ""
			if e.Version != "" {
				version = " (version " + e.Version + ")"
			}
			refuse(r, api.CodeNotFound, "refused: this host's hailo-ollama"+version+" does not offer "+ref+"; it offers "+strings.Join(e.Models, ", "))
			return "", false
		}
		if name != ref {
			return name, true
		}
	}
	return "", true
}

func enginePresent(es []api.Engine, rt api.Runtime) bool {
	for _, e := range es {
		if e.Runtime == rt {
			return e.Present
		}
	}
	return false
}

// runsHere says so when the host runs the model in the namespace already (a placement neither
// failed, evicted nor stopping): ranked again after a placement, the host it went to is not
// merely a host it "fits", where another copy would go.
func runsHere(r *api.Ranked, ps []api.Placement, ns, source, model string) {
	for i := range ps {
		p := &ps[i]
		if p.Namespace != ns || p.Part != nil || p.State.Terminal() || p.State == api.StateStopping ||
			p.Source != source && (model == "" || p.Model != model) {
			continue
		}
		r.Runs = p.ID
		r.Reason = string(r.Verdict) + ": already runs here (" + p.ID + ", " + string(p.State) + ")"
		return
	}
}

// measuredSpeed is the best tokens/s a host has measured for this model.
func measuredSpeed(ps []api.Placement, source, model string) float64 {
	var best float64
	for i := range ps {
		p := &ps[i]
		if p.TokensPerS > best && (p.Source == source || model != "" && p.Model == model) {
			best = p.TokensPerS
		}
	}
	return best
}

// modelName is the name a source is served under when the request names none, as the agent
// names it (source.ModelName: ollama://qwen2 is qwen2:latest). A source the parser refuses has
// no such name; its placements are matched by source alone.
func modelName(raw string) string {
	src, err := source.Parse(strings.TrimSpace(raw))
	if err != nil {
		return ""
	}
	return src.ModelName()
}

// swapSilence says when a swap leaves the device unanswered: the agent pulls the new model
// while the old one answers, then nothing answers while the device switches (hailo-ollama's
// pause, the load, a restart on a release with the swap defect). How long that takes is the
// device's last load as its agent measured it, or Hailo's published load times before one.
func swapSilence(hailo api.Accelerator) string {
	if hailo.LastLoadMillis <= 0 {
		return "it answers until the pull ends, then nothing does for 7–13 s (Hailo's figures)"
	}
	secs := max(1, (hailo.LastLoadMillis+500)/1000)
	return "it answers until the pull ends, then nothing does for ≈ " + strconv.FormatInt(secs, 10) + " s (last load there)"
}

// heldBy are the alive agents that gossip holding the file with digest sum ("" names none).
func heldBy(members []api.Member, sum string) []string {
	if len(sum) < api.HoldPrefix {
		return nil
	}
	prefix := strings.ToLower(sum[:api.HoldPrefix])
	var out []string
	for i := range members {
		m := &members[i]
		if m.Role == api.RoleAgent && m.Liveness == api.Alive && m.Host != nil && m.Host.Files != nil {
			if _, ok := slices.BinarySearch(m.Host.Files.Holds, prefix); ok {
				out = append(out, m.Name)
			}
		}
	}
	return out
}
