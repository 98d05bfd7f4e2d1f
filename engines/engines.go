// Package engines is the one contract every runtime driver implements, so the agent drives
// llama-server, Ollama and hailo-ollama the same way. The drivers live in sub-packages
// (llamaserver, ollama, hailo); model sources and sizing in source and sizing.
package engines

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines/sizing"
)

// Model is what a driver runs: one placement's view of its model.
type Model struct {
	ID     string // placement id, unique on the host
	Name   string // name the gateway serves it under (llama-server's --alias)
	Source string // the source as requested
	Ref    string // engine-side name: "qwen2:1.5b" for ollama and hailo-ollama
	Path   string // local GGUF file, for llama-server (set once pulled)
	// MMProj is the source of a multimodal projector GGUF run beside the model (llama-server's
	// --mmproj), so it reads images; "" for none.
	MMProj  string
	Context int    // context size in tokens
	SHA256  string // expected hex digest of a downloaded file; "" = not checked
	// Bytes is the length of the downloaded file that was sized; a download stops there and
	// refuses another length. 0 = not known.
	Bytes int64
	// Args are extra engine arguments; a driver passes only those on its allowlist.
	Args []string
	// CacheBytes bounds the engine's host prompt cache (llama-server's --cache-ram), as the
	// estimate counted it (api.SizeEstimate.Cache); 0 turns the cache off.
	CacheBytes int64
	// RPC are the loopback ends of a split's workers (llama-server's --rpc), TensorSplit their
	// shares (--tensor-split); none for a model on one host.
	RPC         []string
	TensorSplit []float64
	// Sent counts the bytes a split's main has sent its members (their weights, while it
	// loads); nil for a model on one host. A load that moves bytes is not stalled.
	Sent func() int64
}

// Progress reports a pull.
type Progress struct {
	Status    string // engine's words: "pulling manifest", "downloading", "verifying", "success"
	Completed int64  // bytes done
	Total     int64  // bytes in all; 0 when not yet known
	// From says where the bytes come from when not the origin: "pi5-a over the LAN, 92 MB/s".
	From string
}

// Instance is a loaded model as a driver serves it.
type Instance interface {
	// Endpoint is the engine's base URL on loopback ("http://127.0.0.1:8000").
	Endpoint() string
	// Done is closed when the process behind the instance exits. A daemon's instance (Ollama,
	// hailo-ollama) has no process of its own: its channel is never closed and health checks
	// find failures instead.
	Done() <-chan struct{}
	// Err says why the instance stopped (exit status), once Done is closed.
	Err() error
	// LogPath is the engine's log file, or "" when the driver does not own the engine's output.
	LogPath() string
}

// Message is one chat message. Drivers write it in their engine's shape: tool calls' arguments
// are a JSON string to OpenAI-style engines and an object to Ollama.
type Message struct {
	Role    string `json:"role"` // system, user, assistant or tool
	Content string `json:"content"`
	// ToolCalls are the calls an assistant message made, in a conversation's history.
	ToolCalls []ToolCall `json:"-"`
	// ToolCallID is the call a "tool" message answers; ToolName the function it ran.
	ToolCallID string `json:"-"`
	ToolName   string `json:"-"`
	// Images are the pictures a user message shows the model; only a driver that is an
	// ImageReader is given any.
	Images []Image `json:"-"`
}

// Image is one picture in a message: its bytes, decoded, and their media type (image/png, …).
type Image struct {
	MediaType string
	Data      []byte
}

// Tool is a function the model may call.
type Tool struct {
	Name        string
	Description string
	Parameters  json.RawMessage // a JSON Schema object; nil = no parameters
}

// ToolCall is one call of a tool by the model.
type ToolCall struct {
	ID        string // the engine's id for it ("call_…"); may be empty (Ollama's older answers)
	Name      string
	Arguments string // a JSON document
}

// Format asks for an answer that is one JSON document: any JSON object when Schema is nil,
// else one that fits the schema.
type Format struct {
	Name   string // the schema's name (OpenAI's json_schema.name)
	Schema json.RawMessage
	Strict bool
}

// ErrUnsupported is returned (wrapped, with a BadRequest code) when an engine cannot do what a
// request asks (tools on hailo-ollama, embeddings on a chat-only llama-server).
var ErrUnsupported = errors.New("not supported by this engine")

// ChatRequest is a chat in the engines' common form; the gateway translates the client's
// dialect into it and each driver into its engine's.
type ChatRequest struct {
	Messages    []Message
	Temperature *float64
	TopP        *float64
	TopK        *int
	Seed        *int
	MaxTokens   int // 0 = engine default
	Stop        []string
	// Tools the model may call; ToolChoice is OpenAI's tool_choice as the client sent it
	// ("auto", "none", "required", or {"type":"function","function":{"name":…}}), nil = auto.
	Tools      []Tool
	ToolChoice json.RawMessage
	// Format asks for a JSON answer; nil = free text.
	Format *Format
	// Prompt, when set, is a raw completion: the text is continued as it is, through no chat
	// template, and Messages is empty (OpenAI's /v1/completions, Ollama's generate with raw).
	Prompt string
}

// ChatChunk is one streamed piece of an answer. The last chunk has Done set, the finish
// reason and the token counts when the engine gives them.
type ChatChunk struct {
	Content string
	// ToolCalls are complete calls the model made (drivers assemble streamed pieces); they
	// come in a chunk before the last, whose finish reason is then "tool_calls".
	ToolCalls        []ToolCall
	Done             bool
	FinishReason     string // "stop", "length"
	PromptTokens     int
	CompletionTokens int
	// More says the driver has the answer's next chunk at hand already, so the receiver may
	// hold this one in its write buffer to go out with the next. A driver that sets it sends a
	// chunk without More (an empty one if need be) before it waits on the engine again, so no
	// piece of the answer is ever held while the next is not there.
	More bool
}

// Driver runs models on one runtime.
type Driver interface {
	Runtime() api.Runtime
	// Detect tells whether the engine is present and healthy, its version and what it can run
	// without a pull. It never fails: an absent engine is reported with how to install it.
	Detect(ctx context.Context) api.Engine
	// Health checks the engine serving m (llama-server: the model's own process, /health;
	// Ollama and hailo-ollama: the daemon, GET /).
	Health(ctx context.Context, m Model) error
	// Pull makes m available locally, calling progress as bytes arrive. Cancelling ctx stops it.
	Pull(ctx context.Context, m Model, progress func(Progress)) error
	// Load starts serving m and returns once it answers.
	Load(ctx context.Context, m Model) (Instance, error)
	// Unload stops serving m and frees its memory.
	Unload(ctx context.Context, m Model) error
	// Loaded lists the engine-side names currently loaded.
	Loaded(ctx context.Context) ([]string, error)
	// Chat streams an answer from m, calling emit for each chunk in order; an error from emit
	// (the client went away) stops generation upstream at once, but for ErrEnough (below).
	Chat(ctx context.Context, m Model, req ChatRequest, emit func(ChatChunk) error) error
}

// Describer is a driver that can say what a loaded model is: its format, family, parameter
// count and quantisation, as the engine lists them (Ollama, hailo-ollama) or the file's header
// says (llama-server). The agent asks once a placement is ready and publishes the answer.
type Describer interface {
	Describe(ctx context.Context, m Model) (api.ModelDetails, error)
}

// Optional interfaces a driver or an instance may implement; the agent asks for them.
type (
	// NameChecker refuses names the engine cannot serve a model under (llama-server splits
	// --alias on commas), before anything is sized or pulled.
	NameChecker interface {
		CheckName(name string) error
	}
	// ArgChecker validates extra engine arguments against the driver's allowlist.
	ArgChecker interface {
		CheckArgs(args []string) error
	}
	// RunSizer is implemented by a driver whose engine arguments change the memory a model
	// takes (llama-server's -np slots of the requested context each, -ctk, -ub, -fa…): the
	// model is sized for the run SizeRun returns. An argument the driver cannot size is an
	// error (MemoryCheckFailed).
	RunSizer interface {
		SizeRun(args []string) (sizing.Run, error)
	}
	// ImageReader is implemented by a driver whose engine can read images in a chat's
	// messages; ReadsImages says why m cannot, or nil. The gateway refuses images for any
	// other driver.
	ImageReader interface {
		ReadsImages(m Model) error
	}
	// TokenCounter is implemented by a driver whose engine can count a chat's prompt in the
	// model's own tokens, chat template applied (llama-server: /apply-template, /tokenize).
	TokenCounter interface {
		CountTokens(ctx context.Context, m Model, req ChatRequest) (int, error)
	}
	// Measurer is implemented by an instance whose process the driver owns: what that process
	// holds in memory now.
	Measurer interface {
		Resident() (Resident, error)
	}
)

// Resident is a process's resident memory, in bytes (Linux: /proc/<pid>/status).
type Resident struct {
	RSS  int64 // VmRSS: every resident page, the mapped model file's included
	Anon int64 // RssAnon: the process's own allocations (KV cache, buffers), never reclaimable
}

// Embedder is a driver whose engine turns text into vectors (Ollama's /api/embed, llama-server
// started with --embeddings). A driver without it cannot embed.
type Embedder interface {
	// Embed returns one vector per input, in order, and the tokens the inputs took.
	Embed(ctx context.Context, m Model, inputs []string) (Embeddings, error)
}

// Embeddings are an engine's vectors for a list of inputs.
type Embeddings struct {
	Vectors      [][]float32
	PromptTokens int
}

// ErrEnough, from an emit (wrapped or not), says the caller ended the answer itself (a stop
// sequence occurred) and takes no more of it: Chat returns it at once, and the driver may let
// the engine finish the answer unread rather than cut it, where a cut costs more (Ollama's).
var ErrEnough = errors.New("the caller ended the answer")

// ErrNotFound is returned (wrapped) when the engine does not know a model.
var ErrNotFound = errors.New("model not found")

// Error is an engine failure with a stable code for the API ("EngineUnavailable", "EngineError", …).
type Error struct {
	Code api.Code
	Err  error
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Replayable marks an engine request as safe to send again on a fresh connection when a reused
// keep-alive connection turns out closed before any answer came: an engine closes a kept
// connection once it has been idle a while (cpp-httplib in llama-server: 5 s), which races a
// request sent on it at that moment, and Go's transport retries a POST only when the request
// says it may (an idempotency key). A chat or embedding that no engine
// answered has no effect to repeat. The request needs a body Go can rewind (bytes.Reader).
func Replayable(req *http.Request) {
	req.Header.Set("X-Idempotency-Key", "llmkube")
}
