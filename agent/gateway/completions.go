package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/llmkube/mesh/engines"
)

// OpenAI's legacy POST /v1/completions: a prompt continued as it is (engines.ChatRequest's
// Prompt: llama-server's /v1/completions, Ollama's raw generate; hailo-ollama refuses).

func (g *Gateway) openAICompletions(w http.ResponseWriter, r *http.Request) {
	g.chat(w, r, dialectCompletions)
}

type cmplChoice struct {
	Text         string  `json:"text"`
	Index        int     `json:"index"`
	Logprobs     *string `json:"logprobs"`
	FinishReason *string `json:"finish_reason"`
}

type cmplDoc struct {
	ID      string       `json:"id"`
	Object  string       `json:"object"`
	Created int64        `json:"created"`
	Model   string       `json:"model"`
	Choices []cmplChoice `json:"choices"`
	Usage   *oaUsage     `json:"usage,omitempty"`
}

// cmpl writes a completion, whole or as server-sent events of choices[].text.
type cmpl struct {
	out
	stream bool
	usage  bool // stream_options.include_usage
	doc    cmplDoc
	text   []byte
}

func newCmplEncoder(c *chatCall, o out, start time.Time) encoder {
	return &cmpl{out: o, stream: c.stream, usage: c.usageChunk,
		doc: cmplDoc{ID: "cmpl-" + completionID()[len("chatcmpl-"):], Object: "text_completion", Created: start.Unix(), Model: c.model}}
}

func (s *cmpl) event(choice cmplChoice, usage *oaUsage) error {
	if !s.begun {
		s.begin("text/event-stream")
	}
	d := s.doc
	d.Choices, d.Usage = []cmplChoice{choice}, usage
	if choice.Index < 0 {
		d.Choices = []cmplChoice{}
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	return s.send(append(append([]byte("data: "), b...), "\n\n"...))
}

func (s *cmpl) chunk(content string) error {
	if !s.stream {
		s.text = append(s.text, content...)
		return nil
	}
	return s.event(cmplChoice{Text: content}, nil)
}

// toolCalls cannot happen: a raw completion offers no tools.
func (s *cmpl) toolCalls([]engines.ToolCall) error {
	return fmt.Errorf("a completion cannot call tools")
}

func (s *cmpl) finish(st stats) error {
	u := &oaUsage{st.promptTokens, st.completionTokens, st.promptTokens + st.completionTokens}
	if !s.stream {
		d := s.doc
		d.Choices, d.Usage = []cmplChoice{{Text: string(s.text), FinishReason: &st.finish}}, u
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		s.w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
		s.begin("application/json")
		return s.send(append(b, '\n'))
	}
	if err := s.event(cmplChoice{FinishReason: &st.finish}, nil); err != nil {
		return err
	}
	if s.usage {
		if err := s.event(cmplChoice{Index: -1}, u); err != nil {
			return err
		}
	}
	return s.send([]byte("data: [DONE]\n\n"))
}

func (s *cmpl) started() bool { return s.begun }

func (s *cmpl) fail(f *failure) {
	if s.stream {
		b, _ := json.Marshal(f.openAI())
		s.send(append(append([]byte("data: "), b...), "\n\n"...))
	}
}
