package api

import "time"

// One model across several hosts (a split placement): the main host runs llama-server with
// --rpc and --tensor-split, and every member, the main included, runs a ggml-rpc-server of its
// own for its share of the layers. Each member's share is an ordinary placement on that member
// (a part: runtime RuntimeRPCServer, Placement.Part set), admitted against that member's budget
// like any other; the main placement (Placement.Split set) holds what llama-server itself needs.

// RuntimeRPCServer is llama.cpp's RPC worker (ggml-rpc-server) as a host's engine list shows it
// (its Version is the RPC protocol version), and the runtime of a split's parts. It is not one
// of Runtimes: nothing is placed on it but a split's parts.
const RuntimeRPCServer Runtime = "rpc-server"

// RPCUpgrade is the Upgrade token of the request that turns a sealed API connection into a
// stream to a part's loopback rpc-server: GET /v1/placements/{id}/rpc.
const RPCUpgrade = "llmkube-rpc"

// SplitAsk, in a PlacementRequest, asks the agent it is sent to for a split placement with
// itself as the main host.
type SplitAsk struct {
	// Hosts are the members to use (the main among them or not); empty lets the plan choose.
	Hosts []string `json:"hosts,omitempty"`
	// MaxRTTMillis leaves out hosts whose measured round trip from the main is over it (llama.cpp
	// RPC waits for a round trip to a member at least once a token); 0 is
	// DefaultSplitRTTMillis. At most MaxSplitRTTMillis.
	MaxRTTMillis float64 `json:"max_rtt_ms,omitempty"`
}

// Round-trip bounds of a split's members, in milliseconds: the planner's default (see
// mesh/rank's DefaultMaxRTT for why), and the most SplitAsk.MaxRTTMillis may ask (a member a
// second away would add seconds to every token).
const (
	DefaultSplitRTTMillis = 50
	MaxSplitRTTMillis     = 1000
)

// RTTBound is the round trip the ask allows, 0 for the planner's default (and for no ask).
func (s *SplitAsk) RTTBound() time.Duration {
	if s == nil {
		return 0
	}
	return time.Duration(s.MaxRTTMillis * float64(time.Millisecond))
}

// SplitMember is one member's share of a split, and its arithmetic.
type SplitMember struct {
	Host string `json:"host"`
	Main bool   `json:"main,omitempty"`
	// Layers of the model's repeating layers this member's rpc-server holds; Share is the
	// member's value in --tensor-split (its fraction of the layers).
	Layers int     `json:"layers"`
	Share  float64 `json:"share"`
	// Output: this member holds the model's output layer too (its weights are in Weights),
	// and is llama-server's last device (see SplitPlan.Devices). It is the main whenever the
	// main holds layers, so the logits of every token (4 bytes for each word of the
	// vocabulary) never cross the LAN.
	Output bool `json:"output,omitempty"`
	// What the member's part holds: its layers' weights and KV cache, its compute buffer and
	// the rpc-server process's overhead; Need is their sum (what it reserves). On the main, Main*
	// is what llama-server holds besides (its own compute buffer, overhead and the token
	// embeddings; no prompt cache, see mesh/rank).
	Weights  int64 `json:"weights"`
	KV       int64 `json:"kv"`
	Compute  int64 `json:"compute"`
	Overhead int64 `json:"overhead"`
	Need     int64 `json:"need"`
	MainNeed int64 `json:"main_need,omitempty"`
	// Free is the member's free budget the plan saw.
	Free int64 `json:"free"`
	// TokensPerS is the member's measured speed for this model (0: none measured).
	TokensPerS float64 `json:"tokens_per_s,omitempty"`
	// RTTMillis is the round trip to the member from the planner (0: not measured).
	RTTMillis float64 `json:"rtt_ms,omitempty"`
	// Part is the id of the member's part placement, once admitted; State its state as last seen.
	Part  string         `json:"part,omitempty"`
	State PlacementState `json:"state,omitempty"`
}

// Reserves is what the member reserves for the split in all: its part's Need and, on the main,
// llama-server's MainNeed. It is the one per-host figure a plan, a placement's progress and a
// script show.
func (m SplitMember) Reserves() int64 { return m.Need + m.MainNeed }

// SplitLeftOut is a host a plan did not use, and why.
type SplitLeftOut struct {
	Host   string `json:"host"`
	Code   Code   `json:"code,omitempty"`
	Reason string `json:"reason"`
}

// SplitPlan is a split of one model across hosts.
type SplitPlan struct {
	// Fits: the members hold the model with the headroom asked; otherwise Reason says why not.
	Fits   bool   `json:"fits"`
	Reason string `json:"reason"`
	Main   string `json:"main,omitempty"`
	// Layers is the model's count of repeating layers.
	Layers  int            `json:"layers"`
	Members []SplitMember  `json:"members,omitempty"`
	Left    []SplitLeftOut `json:"left,omitempty"`
	// Protocol is the RPC protocol version every member runs.
	Protocol string `json:"protocol,omitempty"`
	// TokensPerS is the expected speed (0: unknown); Basis says what it rests on.
	TokensPerS float64 `json:"tokens_per_s,omitempty"`
	Basis      string  `json:"basis,omitempty"`
	// MaxRTTMillis is the round-trip bound the plan was asked for (SplitAsk.MaxRTTMillis; 0:
	// the default): a re-plan keeps it.
	MaxRTTMillis float64 `json:"max_rtt_ms,omitempty"`
}

// Devices are the members holding layers in llama-server's order of devices (its --rpc and
// --tensor-split): the one holding the output layer last, since llama.cpp gives the output
// layer to the device of the last layers; the others in the plan's order.
func (p SplitPlan) Devices() []SplitMember {
	var out []SplitMember
	var last *SplitMember
	for i, m := range p.Members {
		switch {
		case m.Layers == 0:
		case m.Output && last == nil:
			last = &p.Members[i]
		default:
			out = append(out, m)
		}
	}
	if last != nil {
		out = append(out, *last)
	}
	return out
}

// TensorSplit is the plan's --tensor-split, in the order of Devices.
func (p SplitPlan) TensorSplit() []float64 {
	var out []float64
	for _, m := range p.Devices() {
		out = append(out, m.Share)
	}
	return out
}

// SplitPart, in a PlacementRequest (from the main host's agent only) and on the part placement
// it makes, is one member's share of a split.
type SplitPart struct {
	// Parent is the main placement's id, on host Main.
	Parent string      `json:"parent"`
	Main   string      `json:"main"`
	Member SplitMember `json:"member"`
}

// Estimate is what the part reserves on its member.
func (p SplitPart) Estimate() SizeEstimate {
	m := p.Member
	return SizeEstimate{
		Bytes: m.Need, Weights: m.Weights, KV: m.KV, Compute: m.Compute, Overhead: m.Overhead,
		Method: SizeHeader, Device: DeviceHost,
		Detail: "share of split " + p.Parent + " on " + p.Main + ": " + FormatBytes(m.Weights) + " of weights + KV " +
			FormatBytes(m.KV) + " + compute " + FormatBytes(m.Compute) + " + rpc-server " + FormatBytes(m.Overhead),
	}
}

// RPCProtocol is the llama.cpp RPC protocol version h's rpc-server engine runs ("5.0.0"), or
// "" when it has none: every member of a split must run the same.
func (h *Host) RPCProtocol() string {
	for _, e := range h.Engines {
		if e.Runtime == RuntimeRPCServer && e.Present {
			return e.Version
		}
	}
	return ""
}
