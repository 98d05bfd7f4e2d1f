package hailo

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand/v2"
	"slices"
	"strings"
	"time"
)

// zooEntry is one model of Hailo's GenAI model zoo, under the name one release gives it (see
// releases in versions.go for which release lists which), with the figures Hailo publishes for
// it (load time, time to first token, tokens per second on a Hailo-10H).
type zooEntry struct {
	name          string // model:tag
	hefFile       string // name in the newer (5.4) library form
	family        string
	parameterSize string
	realHEFBytes  int64 // size of the real HEF; the simulator's are HEFSize bytes
	load, ttft    time.Duration
	tokensPerSec  float64
	style         promptStyle
	temperature   float64
	topP          float64
	topK          int // 0 = not in the manifest
	repetition    float64
	// tools: the model's chat template has a tools branch. The 5.3/5.4 manifests the record
	// holds carry no template (it travels in the HEF), so which HEF templates have one is not
	// recorded: the simulator follows the upstream templates (Qwen2.5, Qwen3 and Llama 3.2
	// have a tools branch; Qwen2 and the DeepSeek R1 distill do not).
	tools bool
}

// zoo511 is the 5.1.1 zoo, with Hailo's figures.
var zoo511 = []zooEntry{
	{"qwen2:1.5b", "Qwen2-1.5B-Instruct.hef", "qwen2", "1.5B", 1_560_000_000,
		7400 * time.Millisecond, 320 * time.Millisecond, 8.2, chatML, 0.7, 0.8, 20, 1.1, false},
	{"qwen2.5-instruct:1.5b", "Qwen2.5-1.5B-Instruct.hef", "qwen2.5", "1.5B", 1_640_000_000,
		8500 * time.Millisecond, 370 * time.Millisecond, 7.0, chatML, 0.7, 0.8, 20, 1.1, true},
	{"qwen2.5-coder:1.5b", "Qwen2.5-Coder-1.5B-Instruct.hef", "qwen2.5", "1.5B", 1_640_000_000,
		7600 * time.Millisecond, 320 * time.Millisecond, 8.2, chatML, 0.7, 0.8, 20, 1.1, true},
	{"llama3.2:3b", "Llama-3.2-3B-Instruct.hef", "llama3.2", "3B", 3_130_000_000,
		12600 * time.Millisecond, 1470 * time.Millisecond, 2.7, llama3, 0.4, 0.9, 50, 1.1, true},
	{"deepseek_r1_distill_qwen:1.5b", "DeepSeek-R1-Distill-Qwen-1.5B.hef", "qwen2", "1.5B", 2_370_000_000,
		12600 * time.Millisecond, 1470 * time.Millisecond, 7.0, deepseek, 0.6, 0.95, 0, 0, false},
}

// zoo is every release's models: 5.1.1's, then later releases' names. qwen2.5:1.5b and
// deepseek_r1:1.5b are 5.1.1's qwen2.5-instruct:1.5b and deepseek_r1_distill_qwen:1.5b renamed
// (the same HEF files), so they are those entries under the new name. Hailo's figures for
// llama3.2:1b and qwen3:1.7b are not in the record the simulator was built from: they borrow
// qwen2:1.5b's and qwen2.5-coder's.
var zoo = append(slices.Clip(zoo511),
	renamed511("qwen2.5-instruct:1.5b", "qwen2.5:1.5b"),
	renamed511("deepseek_r1_distill_qwen:1.5b", "deepseek_r1:1.5b"),
	zooEntry{"llama3.2:1b", "Llama3.2-1B-Instruct.hef", "llama3.2", "1B", 1_560_000_000,
		7400 * time.Millisecond, 320 * time.Millisecond, 8.2, llama3, 0.4, 0.9, 50, 1.1, true},
	zooEntry{"qwen3:1.7b", "Qwen3-1.7B-Instruct.hef", "qwen3", "1.7B", 1_640_000_000,
		7600 * time.Millisecond, 320 * time.Millisecond, 8.2, chatML, 0.7, 0.8, 20, 1.1, true},
)

// renamed511 is 5.1.1's model old under a later release's name for the same HEF.
func renamed511(old, name string) zooEntry {
	i := slices.IndexFunc(zoo511, func(z zooEntry) bool { return z.name == old })
	z := zoo511[i] // a name missing from zoo511 panics at start-up, which every test hits
	z.name = name
	return z
}

// ZooModels lists the 5.1.1 zoo's model names in a stable order (ZooModelsOf for another
// release).
func ZooModels() []string { return ZooModelsOf(Version511) }

// zooOf is the zoo of a release (a normalised version).
func zooOf(version string) []zooEntry {
	var out []zooEntry
	for _, name := range releases[version].models {
		for _, z := range zoo {
			if z.name == name {
				out = append(out, z)
			}
		}
	}
	return out
}

// zooModel finds a model by name in any release's zoo: every name is one model's.
func zooModel(name string) (zooEntry, bool) {
	for _, z := range zoo {
		if z.name == name {
			return z, true
		}
	}
	return zooEntry{}, false
}

// zooByFile finds a model of the release by its HEF file name (the 5.4 library form): renamed
// models share their file, so the release decides which name it is.
func zooByFile(version, file string) (zooEntry, bool) {
	for _, z := range zooOf(version) {
		if z.hefFile == file {
			return z, true
		}
	}
	return zooEntry{}, false
}

// hefContent is a model's fake HEF: size bytes of a ChaCha8 stream keyed by the model's name,
// so the digest is stable for a given name and size (and differs between models).
func hefContent(model string, size int64) io.Reader {
	key := sha256.Sum256([]byte("hailo-sim fake HEF " + model))
	return io.LimitReader(rand.NewChaCha8(key), size)
}

// HEFDigest is the sha256 (hex) of the fake HEF the simulator makes for model at size bytes:
// the digest its manifest names and its library serves.
func HEFDigest(model string, size int64) string {
	h := sha256.New()
	_, _ = io.Copy(h, hefContent(model, size)) // a hash never fails to write
	return hex.EncodeToString(h.Sum(nil))
}

// promptStyle is a chat template family. hailo-ollama renders the manifest's Jinja template;
// the simulator renders the same shapes directly, which is all token counting needs.
type promptStyle int

const (
	chatML promptStyle = iota
	llama3
	deepseek
)

type message struct {
	Role      string     `json:"role"`
	Content   string     `json:"content"`
	ToolCalls []toolCall `json:"tool_calls,omitempty"`
}

// render lays messages out as the model's template would, with the assistant turn opened.
func (s promptStyle) render(msgs []message) string {
	var b strings.Builder
	switch s {
	case llama3:
		b.WriteString("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n\n<|eot_id|>")
		for _, m := range msgs {
			b.WriteString("<|start_header_id|>" + m.Role + "<|end_header_id|>\n\n" + strings.TrimSpace(m.Content) + "<|eot_id|>")
		}
		b.WriteString("<|start_header_id|>assistant<|end_header_id|>\n\n")
	case deepseek:
		b.WriteString("<｜begin▁of▁sentence｜>")
		for _, m := range msgs {
			switch m.Role {
			case "user":
				b.WriteString("<｜User｜>" + m.Content)
			case "assistant":
				b.WriteString("<｜Assistant｜>" + m.Content + "<｜end▁of▁sentence｜>")
			default:
				b.WriteString(m.Content)
			}
		}
		b.WriteString("<｜Assistant｜><think>\n")
	default:
		if len(msgs) == 0 || msgs[0].Role != "system" {
			b.WriteString("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n")
		}
		for _, m := range msgs {
			b.WriteString("<|im_start|>" + m.Role + "\n" + m.Content + "<|im_end|>\n")
		}
		b.WriteString("<|im_start|>assistant\n")
	}
	return b.String()
}

// template returns the manifest's template_params and stop tokens for the style, shortened
// from Hailo's (the simulator never evaluates them; clients only read them from /api/show).
func (s promptStyle) template() (bos, eos, chat string, stops []string) {
	switch s {
	case llama3:
		return "<|begin_of_text|>", "<|eot_id|>",
			"{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{%- endif %}",
			[]string{"<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"}
	case deepseek:
		return "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>",
			"{{bos_token}}{%- for message in messages %}{%- if message['role'] == 'user' %}{{'<｜User｜>' + message['content']}}{%- endif %}{%- if message['role'] == 'assistant' %}{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor -%}{% if add_generation_prompt %}{{'<｜Assistant｜><think>\\n'}}{% endif %}",
			[]string{"<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>"}
	default:
		return "", "<|endoftext|>",
			"{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}",
			[]string{"<|im_end|>", "<|endoftext|>"}
	}
}
