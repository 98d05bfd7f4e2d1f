// Package api holds the types of the agent's HTTP API: the contract between agents, the mesh, the
// console and scripts. It imports nothing of the product, so every part can depend on it.
//
// Compatibility: fields are only ever added. Decoders ignore unknown fields, so an older member
// reads a newer one's documents.
package api

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Version is the API version agents announce; bump the minor part for additive changes.
const Version = "1.0"

// Runtime names an engine kind.
type Runtime string

const (
	RuntimeLlamaServer Runtime = "llama-server"
	RuntimeOllama      Runtime = "ollama"
	RuntimeHailoOllama Runtime = "hailo-ollama"
)

// Runtimes lists every runtime in a stable order.
var Runtimes = []Runtime{RuntimeLlamaServer, RuntimeOllama, RuntimeHailoOllama}

// Valid reports whether r is a known runtime.
func (r Runtime) Valid() bool {
	for _, k := range Runtimes {
		if r == k {
			return true
		}
	}
	return false
}

// Priority orders placements for eviction: batch < low < normal < high < critical.
type Priority string

const (
	PriorityBatch    Priority = "batch"
	PriorityLow      Priority = "low"
	PriorityNormal   Priority = "normal"
	PriorityHigh     Priority = "high"
	PriorityCritical Priority = "critical"
)

var priorities = []Priority{PriorityBatch, PriorityLow, PriorityNormal, PriorityHigh, PriorityCritical}

// Level returns the priority's rank (0 = batch), or -1 for an unknown priority.
// The empty priority counts as normal.
func (p Priority) Level() int {
	if p == "" {
		p = PriorityNormal
	}
	for i, q := range priorities {
		if p == q {
			return i
		}
	}
	return -1
}

// PlacementState is where a placement is in its life.
type PlacementState string

const (
	StateSizing  PlacementState = "sizing"
	StatePulling PlacementState = "pulling"
	StateLoading PlacementState = "loading"
	StateReady   PlacementState = "ready"
	// StateRestarting: the engine failed its health check or exited and is being restarted;
	// the gateway does not route to it.
	StateRestarting PlacementState = "restarting"
	StateFailed     PlacementState = "failed"
	StateEvicted    PlacementState = "evicted"
	StateStopping   PlacementState = "stopping"
	// StateSleeping: idle for its TTL, the engine was unloaded and the budget freed; the files
	// and the record stay, and the next request for the model loads it again.
	StateSleeping PlacementState = "sleeping"
	// StateUnavailable is never set by an agent: a member's view marks the placements of a
	// suspect, dead, left or unreachable host so, so nothing stale is shown as ready.
	StateUnavailable PlacementState = "unavailable"
)

// Terminal reports whether the placement holds no memory and will not change by itself.
func (s PlacementState) Terminal() bool {
	return s == StateFailed || s == StateEvicted
}

// Outcome is what a placement's state means to one waiting for it: done with a nil error once
// it is ready (or sleeping: it was, and a request wakes it); done with its refusal (an *Error,
// EngineError when the agent named no code) once it failed or was evicted; not done while it is
// pulling, loading or starting. `place --wait` and the console's Place view (both through
// Client.FollowPlacement) decide by it.
func (p Placement) Outcome() (done bool, err error) {
	switch {
	case p.State == StateReady, p.State == StateSleeping: // it loaded, and went idle since
		return true, nil
	case p.State.Terminal():
		code := p.Code
		if code == "" {
			code = CodeEngineError
		}
		return true, &Error{Code: code, Message: p.Reason}
	}
	return false, nil
}

// Code is a stable refusal or error code.
type Code string

const (
	CodeInvalidSource      Code = "InvalidSource"
	CodeRuntimeMismatch    Code = "RuntimeMismatch"
	CodeAcceleratorMissing Code = "AcceleratorMissing"
	CodeInsufficientMemory Code = "InsufficientMemory"
	CodeMemoryCheckFailed  Code = "MemoryCheckFailed"
	CodeNamespaceNotAllow  Code = "NamespaceNotAllowed"
	CodeEngineUnavailable  Code = "EngineUnavailable"
	CodeNotFound           Code = "NotFound"
	CodeUnauthorized       Code = "Unauthorized"
	// Codes below are not admission refusals but are still stable.
	CodeBadRequest   Code = "BadRequest"
	CodeConflict     Code = "Conflict"
	CodeTooBusy      Code = "TooBusy"
	CodeEngineError  Code = "EngineError"
	CodePullFailed   Code = "PullFailed"
	CodeUnreachable  Code = "Unreachable"
	CodeInternal     Code = "Internal"
	CodeContextLimit Code = "ContextTooLong"
	// CodeOnBattery: the host runs on battery and the request asked for one that does not.
	CodeOnBattery Code = "OnBattery"
	// CodeForbidden: the token is good, but its holder may not do this (place into another
	// namespace, protect a placement, ask for a memory check that only warns).
	CodeForbidden Code = "Forbidden"
)

// Error is the API's error value and its JSON shape inside ErrorBody.
type Error struct {
	Code    Code   `json:"code"`
	Message string `json:"message"`
	// Fix, when set, says what would make the request succeed ("free 1.2 GiB: delete qwen2:1.5b").
	Fix string `json:"fix,omitempty"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// Errorf builds an *Error.
func Errorf(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorBody is every error response: {"error":{"code":"…","message":"…"}}.
type ErrorBody struct {
	Error *Error `json:"error"`
}

// MemoryCheck modes: "" (fail closed: an unsized model is refused) or "warn" (admit with a logged warning).
const MemoryCheckWarn = "warn"

// PlacementRequest asks an agent to run a model. POST /v1/placements, POST /v1/estimate.
type PlacementRequest struct {
	Source    string   `json:"source"`
	Runtime   Runtime  `json:"runtime,omitempty"`   // inferred from the source when empty
	Namespace string   `json:"namespace,omitempty"` // "default" when empty
	Context   int      `json:"context,omitempty"`   // tokens; 0 = the runtime's default (2048)
	Priority  Priority `json:"priority,omitempty"`  // normal when empty
	Name      string   `json:"name,omitempty"`      // name served by the gateway; derived from the source when empty
	Protected bool     `json:"protected,omitempty"` // never evicted
	// MemoryCheck "warn" admits a model whose size cannot be known, or one that does not fit,
	// with a logged warning: the explicit "load anyway".
	MemoryCheck string `json:"memory_check,omitempty"`
	// SHA256 is the expected hex digest of a downloaded GGUF file (https://, hf://): the
	// download counts only when it matches.
	SHA256 string `json:"sha256,omitempty"`
	// Args are extra engine arguments (llama-server only: "-ngl", "99"); the agent passes only
	// those on the driver's allowlist and refuses the request otherwise.
	Args []string `json:"args,omitempty"`
	// TTL is how long the placement stays loaded with no request before it sleeps (its engine
	// unloaded, its budget freed, loaded again by the next request): a duration ("10m") or
	// seconds ("600"); negative never sleeps; empty takes the agent's --idle-ttl.
	TTL string `json:"ttl,omitempty"`
	// Replicas is how many hosts the mesh keeps the model on (an intent, see Intent): 0 keeps
	// the intent's count, or 1 for a new one; at most MaxReplicas.
	Replicas int `json:"replicas,omitempty"`
	// MaxReplicas, over Replicas, lets the mesh add replicas while its replicas are busy and
	// drop them once idle (agent/keeper); 0 or up to Replicas never scales.
	MaxReplicas int `json:"max_replicas,omitempty"`
	// Hosts, when set, are the only hosts the mesh may place the intent's replicas on.
	Hosts []string `json:"hosts,omitempty"`
	// Labels, when set, are labels a host must carry (Host.Labels) to be ranked fit for it.
	Labels map[string]string `json:"labels,omitempty"`
	// NotOnBattery keeps the intent off hosts running on battery (Host.OnBattery): new replicas
	// go elsewhere; one already running stays.
	NotOnBattery bool `json:"not_on_battery,omitempty"`
	// MMProj is the source of a multimodal projector GGUF (a path, https:// or hf://) that
	// llama-server runs beside the model (--mmproj), so the model reads images. It is sized,
	// admitted and pulled with the model.
	MMProj string `json:"mmproj,omitempty"`
	// Split asks for one model across several hosts, this agent's host the main (split.go).
	Split *SplitAsk `json:"split,omitempty"`
	// Part is one member's share of a split; only a main host's agent asks for one.
	Part *SplitPart `json:"part,omitempty"`
}

// ParseTTL reads a TTL the way Ollama reads keep_alive: a duration string ("5m", "1h30m"), or a
// number of seconds ("300", "-1"). Negative means never; 0 means at once.
func ParseTTL(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if n, err := strconv.ParseFloat(s, 64); err == nil {
		if math.IsNaN(n) || math.Abs(n) > maxTTLSeconds {
			return 0, fmt.Errorf("ttl %q: want a duration or up to %d seconds", s, maxTTLSeconds)
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("ttl %q: want a duration (\"5m\") or a number of seconds", s)
	}
	return d, nil
}

// maxTTLSeconds bounds a TTL given in seconds (ten years), so it fits a time.Duration.
const maxTTLSeconds = 10 * 365 * 24 * 3600

// DefaultNamespace is the namespace of requests that name none.
const DefaultNamespace = "default"

// DefaultContext is the context size used when a request names none.
const DefaultContext = 2048

// Size methods: how an estimate was obtained.
const (
	SizeHeader   = "header"   // GGUF header read locally or by HTTP range
	SizeHead     = "head"     // HEAD Content-Length of a blob
	SizeRange    = "range"    // one-byte range GET (Content-Range total)
	SizeRegistry = "registry" // Ollama registry manifest layer size
	SizeShow     = "show"     // local Ollama daemon's /api/show
	SizeFallback = "fallback" // 1.2 × file + 512 MiB: the header could not be read
	SizeUnknown  = "unknown"
)

// Devices a placement's memory is counted against.
const (
	DeviceHost  = "host"
	DeviceHailo = "hailo" // a Hailo-10H's own 8 GB; one model at a time
)

// SizeEstimate is what a model will cost, known before any byte of it is pulled.
type SizeEstimate struct {
	Bytes    int64 `json:"bytes"` // total to reserve; 0 when unknown
	Weights  int64 `json:"weights,omitempty"`
	KV       int64 `json:"kv,omitempty"`
	Compute  int64 `json:"compute,omitempty"`
	Overhead int64 `json:"overhead,omitempty"`
	// Cache bounds the engine's host prompt cache (llama-server's --cache-ram), counted in Bytes.
	Cache int64 `json:"cache,omitempty"`
	// TrainContext is the context the model was trained for (its header's context_length), past
	// which llama-server caps every request; 0 when unknown.
	TrainContext int    `json:"train_context,omitempty"`
	Method       string `json:"method"`           // one of the Size* constants
	Device       string `json:"device,omitempty"` // DeviceHost or DeviceHailo
	Detail       string `json:"detail,omitempty"` // the arithmetic, in words
	// FileBytes is the length of the file that was sized, for a GGUF that is downloaded: the
	// download stops there and the finished file is sized again before it counts.
	FileBytes int64 `json:"file_bytes,omitempty"`
	// Layers is the model's count of repeating layers (a GGUF's block_count), which a split
	// divides among its members; 0 when unknown.
	Layers int `json:"layers,omitempty"`
	// InputWeights and OutputWeights are the parts of Weights outside the repeating layers:
	// the token embeddings, which llama-server keeps in its own memory, and the output layer,
	// which goes with its last device. A split counts them where they land; 0 when unknown.
	InputWeights  int64 `json:"input_weights,omitempty"`
	OutputWeights int64 `json:"output_weights,omitempty"`
}

// Placement is one model on one host.
type Placement struct {
	ID          string   `json:"id"`
	Host        string   `json:"host"`  // node name of the owning agent
	Model       string   `json:"model"` // name the gateway serves it under
	Source      string   `json:"source"`
	Runtime     Runtime  `json:"runtime"`
	Namespace   string   `json:"namespace"`
	Context     int      `json:"context"`
	Priority    Priority `json:"priority"`
	Protected   bool     `json:"protected,omitempty"`
	MemoryCheck string   `json:"memory_check,omitempty"`
	SHA256      string   `json:"sha256,omitempty"` // expected digest of a downloaded file
	Args        []string `json:"args,omitempty"`   // extra engine arguments, allowlisted
	MMProj      string   `json:"mmproj,omitempty"` // multimodal projector's source: the model reads images
	// TTL is the placement's idle time before it sleeps, as a Go duration ("5m0s"; negative:
	// never); empty takes the agent's --idle-ttl. A request's keep_alive changes it.
	TTL   string         `json:"ttl,omitempty"`
	State PlacementState `json:"state"`
	// Progress is 0..1 while pulling, and while a split's main loads (StateLoading or
	// StateRestarting): what it has sent its members of their layers' weights.
	Progress float64 `json:"progress,omitempty"`
	Code     Code    `json:"code,omitempty"` // why it failed or was evicted
	Reason   string  `json:"reason,omitempty"`
	// Was is the state an unavailable placement (State StateUnavailable, set by a member's view,
	// never by its agent) had before its host stopped answering: "ready" is a model that will
	// serve again when the host comes back.
	Was    PlacementState `json:"was,omitempty"`
	Memory SizeEstimate   `json:"memory"`
	// Resident is the engine process's measured resident memory (VmRSS) in bytes, updated at
	// each health check; 0 when not measured (a daemon's model, or not Linux).
	Resident int64 `json:"resident,omitempty"`
	// Held is what the placement counts against the budget once measured: the estimate,
	// corrected by what the engine was seen to hold (see the agent's held); 0 = the estimate.
	Held      int64     `json:"held,omitempty"`
	Restarts  int       `json:"restarts,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
	LastUsed  time.Time `json:"last_used,omitzero"`
	// BusySince is when more than BusyInFlight requests came to be in flight on it at once
	// (they queue at its engine); zero when fewer are. An intent scales on it.
	BusySince   time.Time     `json:"busy_since,omitzero"`
	TTFTMillis  float64       `json:"ttft_ms,omitempty"`        // rolling time to first token
	TokensPerS  float64       `json:"tokens_per_s,omitempty"`   // rolling generation speed
	PulledBytes int64         `json:"pulled_bytes,omitempty"`   // while pulling, or sent (see Progress)
	TotalBytes  int64         `json:"total_bytes,omitempty"`    // while pulling, or to send
	ReplacedBy  string        `json:"replaced_by,omitempty"`    // a Hailo swap evicted it for this id
	LogPath     string        `json:"log_path,omitempty"`       // engine log on the owning host
	Engine      string        `json:"engine_address,omitempty"` // loopback address on the owning host
	Details     *ModelDetails `json:"details,omitempty"`        // what the engine reports of the loaded model
	// Split is a split placement's plan, on its main host: members, shares and parts.
	Split *SplitPlan `json:"split,omitempty"`
	// Part is a split's part: the share of one member (runtime RuntimeRPCServer).
	Part *SplitPart `json:"part,omitempty"`
}

// QualifiedName is the name a chat addresses the placement by across namespaces: its model
// name in the default namespace, "namespace/name" in any other. The gateway resolves a bare
// name in the default namespace only (or the token's own), never across namespaces.
func (p Placement) QualifiedName() string {
	if p.Namespace == "" || p.Namespace == DefaultNamespace {
		return p.Model
	}
	return p.Namespace + "/" + p.Model
}

// Moving says what the placement's byte counts (PulledBytes of TotalBytes, Progress) are
// moving: "pulled" while it pulls, "sent to the members" while a split's main sends its members
// their weights, "" when nothing is.
func (p Placement) Moving() string {
	switch {
	case p.State == StatePulling:
		return "pulled"
	case (p.State == StateLoading || p.State == StateRestarting) && p.Split != nil && p.TotalBytes > 0:
		return "sent to the members"
	}
	return ""
}

// ModelDetails is what an engine (or the model file) says a loaded model is, in the words
// Ollama's "details" use, so the gateway's /api/tags and /api/ps can pass them on.
type ModelDetails struct {
	Format            string   `json:"format,omitempty"` // "gguf", "hef"
	Family            string   `json:"family,omitempty"` // "llama", "qwen2"
	Families          []string `json:"families,omitempty"`
	ParameterSize     string   `json:"parameter_size,omitempty"`     // "1.5B", "494.03M"
	QuantizationLevel string   `json:"quantization_level,omitempty"` // "Q4_0", "F16"
	Size              int64    `json:"size,omitempty"`               // bytes of the model's files on disk
}

// Memory is a host's memory accounting, in bytes.
type Memory struct {
	Total       int64 `json:"total"`     // min(MemTotal, cgroup limit)
	Available   int64 `json:"available"` // min(MemAvailable, limit − current)
	Budget      int64 `json:"budget"`    // fraction × Total, or the operator's override
	Committed   int64 `json:"committed"` // held by placements past admission
	Reserved    int64 `json:"reserved"`  // held by in-flight admissions
	CgroupLimit int64 `json:"cgroup_limit,omitempty"`
	// HostFigures: the memory controller is on cgroup v1, so the figures are the host's.
	HostFigures bool `json:"host_figures,omitempty"`
}

// Free is the budget left for new placements.
func (m Memory) Free() int64 {
	f := m.Budget - m.Committed - m.Reserved
	if f < 0 {
		return 0
	}
	return f
}

// Accelerator is a device that runs models.
type Accelerator struct {
	Kind   string `json:"kind"` // "hailo", "metal", "nvidia"
	Name   string `json:"name"` // "Hailo-10H", "Apple M2", "NVIDIA GeForce RTX 3090"
	Device string `json:"device,omitempty"`
	Memory int64  `json:"memory,omitempty"` // device memory in bytes, when known
	// Loaded is the model on a one-model-at-a-time device (a Hailo-10H), if any.
	Loaded string `json:"loaded,omitempty"`
	// LastLoadMillis is how long the last load on a one-model device took, as its agent
	// measured it (start to ready): what a swap onto it leaves unanswered. 0 before any.
	LastLoadMillis int64 `json:"last_load_ms,omitempty"`
}

// Engine is a runtime as seen on one host.
type Engine struct {
	Runtime Runtime `json:"runtime"`
	Present bool    `json:"present"`
	Healthy bool    `json:"healthy"`
	Address string  `json:"address,omitempty"` // loopback address (daemons) or binary path (llama-server)
	Version string  `json:"version,omitempty"`
	Detail  string  `json:"detail,omitempty"` // why absent or unhealthy; how to install
	// Models lists what the engine can run without a pull (hailo zoo, local ollama tags).
	Models []string `json:"models,omitempty"`
}

// Host is an agent's capacity and state. GET /v1/host.
type Host struct {
	Name         string        `json:"name"` // node name, unique in the mesh
	Hostname     string        `json:"hostname"`
	OS           string        `json:"os"`
	Arch         string        `json:"arch"`
	Chip         string        `json:"chip,omitempty"`
	CPUs         int           `json:"cpus"`
	PageSize     int           `json:"page_size,omitempty"`
	Memory       Memory        `json:"memory"`
	Accelerators []Accelerator `json:"accelerators,omitempty"`
	Engines      []Engine      `json:"engines,omitempty"`
	Namespaces   []string      `json:"namespaces,omitempty"` // allowlist; empty = any
	// Labels are the operator's (`llmkube-agent run --label k=v`): a placement or intent that
	// requires labels goes only to hosts carrying them (CheckLabels bounds them).
	Labels map[string]string `json:"labels,omitempty"`
	// OnBattery: the host runs on its battery now (refreshed every 30 s), so intents placed
	// with NotOnBattery go elsewhere.
	OnBattery bool `json:"on_battery,omitempty"`
	// Anonymous is the one namespace whose models this agent serves without a token, on
	// listing and inference routes only (opt-in, for clients that cannot send one); "" = off.
	Anonymous string `json:"anonymous_namespace,omitempty"`
	// LANHTTP: the API serves plain HTTP to other hosts too (the gateway's routes only), so
	// what crosses it can be read on the LAN.
	LANHTTP    bool      `json:"lan_http,omitempty"`
	Placements int       `json:"placements"`
	APIAddr    string    `json:"api_addr"` // host:port of this agent's API
	Version    string    `json:"version"`
	StartedAt  time.Time `json:"started_at"`
	Generation uint64    `json:"generation"` // bumps on every state change
	// Unknown lists the probe fields that could not be read.
	Unknown []string `json:"unknown,omitempty"`
	// Offline: the agent downloads from no internet host (a local mesh): hf:// and https://
	// sources are refused there.
	Offline bool `json:"offline,omitempty"`

	// Files is what this agent serves its peers from its model store; nil when it serves none.
	Files *FileService `json:"files,omitempty"`
}

// FileService is how an agent serves the model files in its store to the mesh's other agents:
// by SHA-256, over the sealed channel, with ranges (GET /v1/files/{sha256}).
type FileService struct {
	// Holds are the first HoldPrefix hex digits of each file's SHA-256, sorted: enough to tell
	// which host to ask (the full digest is what is asked for and checked), compact enough to
	// gossip.
	Holds []string `json:"holds,omitempty"`
	// MaxUploads is how many copies it serves at once; more are refused (429) and go elsewhere.
	MaxUploads int `json:"max_uploads"`
	// Rate is the bytes per second all its copies together may send; 0 is unlimited.
	Rate int64 `json:"rate,omitempty"`
}

// HoldPrefix is how many hex digits of a digest FileService.Holds keeps.
const HoldPrefix = 16

// Role of a mesh member.
type Role string

const (
	RoleAgent   Role = "agent"
	RoleConsole Role = "console"
)

// Liveness of a mesh member.
type Liveness string

const (
	Alive       Liveness = "alive"
	Suspect     Liveness = "suspect"
	Dead        Liveness = "dead"
	Left        Liveness = "left"
	Unreachable Liveness = "unreachable" // alive in gossip but its API address does not answer
)

// Member is one node in a view of the mesh.
type Member struct {
	Name       string      `json:"name"`
	Role       Role        `json:"role"`
	Addr       string      `json:"addr"` // gossip address
	Liveness   Liveness    `json:"liveness"`
	Reason     string      `json:"reason,omitempty"` // why unreachable, etc.
	Host       *Host       `json:"host,omitempty"`   // nil for consoles and before state arrives
	Placements []Placement `json:"placements,omitempty"`
	Updated    time.Time   `json:"updated"`
	// SealKey is the hex fingerprint of the key the member's API presents on the sealed
	// channel, as it gossips it; "" when it gossips none. A client dialling it checks the key.
	SealKey string `json:"seal_key,omitempty"`
	// RTTMillis is the lowest round trip of the viewing member's last gossip probes to this
	// one (the link's own delay, not a busy host's late acks), in milliseconds; 0 when not
	// measured (itself, a console, no ack yet).
	RTTMillis float64 `json:"rtt_ms,omitempty"`
}

// MeshView is one member's picture of the whole mesh. GET /v1/mesh.
type MeshView struct {
	Mesh    string    `json:"mesh"` // mesh id
	Self    string    `json:"self"`
	Members []Member  `json:"members"`
	At      time.Time `json:"at"`
}

// Event types on GET /v1/events.
const (
	EventPlacement = "placement" // a placement changed state or progress
	EventRefused   = "refused"   // admission refused a request
	EventDeleted   = "deleted"
	EventEngine    = "engine" // an engine crashed, restarted, became healthy
	EventMesh      = "mesh"   // a member joined, left, turned suspect/dead/unreachable
	EventLog       = "log"
)

// MeshEventKind is what a mesh event (type EventMesh) says happened to its Member.
type MeshEventKind string

const (
	MeshJoined       MeshEventKind = "joined"
	MeshRecovered    MeshEventKind = "recovered" // alive again after suspect, dead or unreachable
	MeshSuspect      MeshEventKind = "suspect"
	MeshDead         MeshEventKind = "dead"
	MeshLeft         MeshEventKind = "left"
	MeshUnreachable  MeshEventKind = "unreachable"
	MeshNameConflict MeshEventKind = "name conflict"
)

// Event is one server-sent event (`event: <type>`, `data: <Event JSON>`).
type Event struct {
	Seq       uint64     `json:"seq"`
	Time      time.Time  `json:"time"`
	Type      string     `json:"type"`
	Host      string     `json:"host,omitempty"`
	Message   string     `json:"message"`
	Code      Code       `json:"code,omitempty"`
	Placement *Placement `json:"placement,omitempty"`
	Member    string     `json:"member,omitempty"`
	// Kind is a mesh event's kind; its Message starts with the same word, for people.
	Kind MeshEventKind `json:"kind,omitempty"`
}

// Subject is the member an event is about: Member for a mesh event (Host is then the member
// that saw it), else Host, the agent that published it.
func (e Event) Subject() string {
	if e.Member != "" {
		return e.Member
	}
	return e.Host
}

// Verdict of ranking a host for a placement.
type Verdict string

const (
	VerdictFits    Verdict = "fits"
	VerdictSwap    Verdict = "swap" // fits by replacing the model on a one-model device
	VerdictRefused Verdict = "refused"
)

// Ranked is one host's verdict for a placement request, best first in a ranking.
type Ranked struct {
	Host    string  `json:"host"`
	Verdict Verdict `json:"verdict"`
	Code    Code    `json:"code,omitempty"` // for refusals
	Reason  string  `json:"reason"`         // "fits: needs 1.9 GiB, 5.2 GiB free"
	Need    int64   `json:"need"`
	Free    int64   `json:"free"`
	Score   float64 `json:"score"`
	Runtime Runtime `json:"runtime,omitempty"`
	// Runs is the placement of the model (in the request's namespace) the host runs already,
	// when it does: the host is where it is, not a place for another copy.
	Runs string `json:"runs,omitempty"`
}

// Estimation is the answer to POST /v1/estimate: the size and whether this host would admit it now.
type Estimation struct {
	Estimate SizeEstimate `json:"estimate"`
	Verdict  Verdict      `json:"verdict"`
	Code     Code         `json:"code,omitempty"`
	Reason   string       `json:"reason"`
	Free     int64        `json:"free"`
}

// PlacementList is GET /v1/placements.
type PlacementList struct {
	Placements []Placement `json:"placements"`
}
