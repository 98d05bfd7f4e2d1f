package dialect

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/llmkube/mesh/engines"
)

// OpenAI's legacy POST /v1/completions: a prompt continued as it is (engines.ChatRequest's
// Prompt: llama-server's /v1/completions, Ollama's raw generate; hailo-ollama refuses).

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
	Out
	stream bool
	usage  bool // stream_options.include_usage
	doc    cmplDoc
	text   []byte
}

func newCmplEncoder(c *Call, o Out, start time.Time) Encoder {
	return &cmpl{Out: o, stream: c.Stream, usage: c.usageChunk,
		doc: cmplDoc{ID: "cmpl-" + completionID()[len("chatcmpl-"):], Object: "text_completion", Created: start.Unix(), Model: c.Model}}
}

func (s *cmpl) event(choice cmplChoice, usage *oaUsage) error {
	if !s.begun {
		s.Begin("text/event-stream")
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
	return s.Send(append(append([]byte("data: "), b...), "\n\n"...))
}

func (s *cmpl) Chunk(content string) error {
	if !s.stream {
		s.text = append(s.text, content...)
		return nil
	}
	return s.event(cmplChoice{Text: content}, nil)
}

// toolCalls cannot happen: a raw completion offers no tools.
func (s *cmpl) ToolCalls([]engines.ToolCall) error {
	return fmt.Errorf("a completion cannot call tools")
}

func (s *cmpl) Finish(st Stats) error {
	u := &oaUsage{st.PromptTokens, st.CompletionTokens, st.PromptTokens + st.CompletionTokens}
	if !s.stream {
		d := s.doc
		d.Choices, d.Usage = []cmplChoice{{Text: string(s.text), FinishReason: &st.Finish}}, u
		b, err := json.Marshal(d)
		if err != nil {
			return err
		}
		s.w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
		s.Begin("application/json")
		return s.Send(append(b, '\n'))
	}
	if err := s.event(cmplChoice{FinishReason: &st.Finish}, nil); err != nil {
		return err
	}
	if s.usage {
		if err := s.event(cmplChoice{Index: -1}, u); err != nil {
			return err
		}
	}
	return s.Send([]byte("data: [DONE]\n\n"))
}

func (s *cmpl) Started() bool { return s.begun }

func (s *cmpl) Fail(f *Failure) {
	if s.stream {
		b, _ := json.Marshal(f.openAI())
		s.Send(append(append([]byte("data: "), b...), "\n\n"...))
	}
}
