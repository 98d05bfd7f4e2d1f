package source

import (
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

func TestParseAccepts(t *testing.T) {
	cases := []struct {
		in        string
		want      Source
		canonical string
		name      string
	}{
		{"/models/qwen2-1.5b.Q4_0.gguf", Source{Kind: KindFile, Path: "/models/qwen2-1.5b.Q4_0.gguf"}, "file:///models/qwen2-1.5b.Q4_0.gguf", "qwen2-1.5b.Q4_0"},
		{"file:///models/tiny.gguf", Source{Kind: KindFile, Path: "/models/tiny.gguf"}, "file:///models/tiny.gguf", "tiny"},
		{"FILE:///models/x.GGUF", Source{Kind: KindFile, Path: "/models/x.GGUF"}, "file:///models/x.GGUF", "x"},
		{"file:///my%20models/a%23b.gguf", Source{Kind: KindFile, Path: "/my models/a#b.gguf"}, "file:///my%20models/a%23b.gguf", "a#b"},
		{"/srv//models/./m.gguf", Source{Kind: KindFile, Path: "/srv/models/m.gguf"}, "file:///srv/models/m.gguf", "m"},
		{"https://example.com/m/phi.gguf?download=true", Source{Kind: KindHTTPS, URL: "https://example.com/m/phi.gguf?download=true"}, "https://example.com/m/phi.gguf?download=true", "phi"},
		{"http://127.0.0.1:8080/m.gguf", Source{Kind: KindHTTPS, URL: "http://127.0.0.1:8080/m.gguf", Insecure: true}, "http://127.0.0.1:8080/m.gguf", "m"},
		{"hf://Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_0.gguf", Source{Kind: KindHF, Owner: "Qwen", Repo: "Qwen2.5-1.5B-Instruct-GGUF", File: "qwen2.5-1.5b-instruct-q4_0.gguf"}, "hf://Qwen/Qwen2.5-1.5B-Instruct-GGUF/qwen2.5-1.5b-instruct-q4_0.gguf", "qwen2.5-1.5b-instruct-q4_0"},
		{"hf://unsloth/big_model/Q4_K_M/big-00001-of-00002.gguf", Source{Kind: KindHF, Owner: "unsloth", Repo: "big_model", File: "Q4_K_M/big-00001-of-00002.gguf"}, "hf://unsloth/big_model/Q4_K_M/big-00001-of-00002.gguf", "big-00001-of-00002"},
		{"ollama://qwen2:1.5b", Source{Kind: KindOllama, Name: "qwen2", Tag: "1.5b"}, "ollama://qwen2:1.5b", "qwen2:1.5b"},
		{"ollama://llama3", Source{Kind: KindOllama, Name: "llama3", Tag: "latest"}, "ollama://llama3:latest", "llama3:latest"},
		{"ollama://library/llama3:8b-instruct-q4_K_M", Source{Kind: KindOllama, Name: "llama3", Tag: "8b-instruct-q4_K_M"}, "ollama://llama3:8b-instruct-q4_K_M", "llama3:8b-instruct-q4_K_M"},
		{"ollama://someone/custom:v1", Source{Kind: KindOllama, Name: "someone/custom", Tag: "v1"}, "ollama://someone/custom:v1", "someone/custom:v1"},
		{"hailo://qwen2.5-instruct:1.5b", Source{Kind: KindHailo, Name: "qwen2.5-instruct", Tag: "1.5b"}, "hailo://qwen2.5-instruct:1.5b", "qwen2.5-instruct:1.5b"},
		{"hailo://deepseek_r1_distill_qwen:1.5b", Source{Kind: KindHailo, Name: "deepseek_r1_distill_qwen", Tag: "1.5b"}, "hailo://deepseek_r1_distill_qwen:1.5b", "deepseek_r1_distill_qwen:1.5b"},
		{"HAILO://llama3.2:3b", Source{Kind: KindHailo, Name: "llama3.2", Tag: "3b"}, "hailo://llama3.2:3b", "llama3.2:3b"},
	}
	for _, c := range cases {
		t.Run(c.in, func(t *testing.T) {
			got, err := Parse(c.in)
			require.NoError(t, err)
			c.want.Raw = c.in
			assert.Equal(t, c.want, got)
			assert.Equal(t, c.canonical, got.String())
			assert.Equal(t, c.name, got.ModelName())
			assert.Equal(t, c.name, got.Ref())
			again, err := Parse(got.String())
			require.NoError(t, err)
			again.Raw = got.Raw
			assert.Equal(t, got, again, "canonical form parses back to the same source")
		})
	}
}

func TestParseRefuses(t *testing.T) {
	cases := []struct{ in, msg string }{
		{"", "empty source"},
		{"/m/" + strings.Repeat("a", MaxLen) + ".gguf", "bytes long; the limit is 2048"},
		{"/models/a\x00.gguf", `control character '\x00'`},
		{"/models/a\n.gguf", `control character '\n'`},
		{"hailo://qwen2\t:1.5b", `control character '\t'`},
		{"/models/\xff.gguf", "not valid UTF-8"},
		{" /models/a.gguf", "leading or trailing spaces"},
		{"models/a.gguf", "is a relative path; give an absolute path"},
		{"qwen2:1.5b", "has no scheme; did you mean ollama://qwen2:1.5b or hailo://qwen2:1.5b?"},
		{"just-words", "has no scheme"},
		{"ftp://host/m.gguf", `unknown scheme "ftp"`},
		{"/models/../etc/m.gguf", "contains a '..' segment"},
		{"file:///models/%2e%2e/m.gguf", "contains a '..' segment"},
		{"file:///models/a%00.gguf", "decoded path contains the control character"},
		{"/models/", "names a folder"},
		{"/models/readme.txt", "does not name a .gguf file; file sources are GGUF models for llama-server"},
		{"/models/.gguf", "the file name is only the extension"},
		{"file://server/models/m.gguf", `names host "server"`},
		{"file:///models/m.gguf?x=1", "has a query or fragment"},
		{"file://", "names no file"},
		{"https://example.com/m.bin", "does not name a .gguf file; https sources are GGUF models"},
		{"https:///m.gguf", "names no host"},
		{"https://user:pw@example.com/m.gguf", "carries credentials"},
		{"https://example.com/m.gguf#frag", "has a fragment"},
		{"https://example.com:99999/m.gguf", "bad port"},
		{"https://exa mple.com/m.gguf", "https source"},
		{"hf://owner/repo", "names no file; want hf://owner/repo/file.gguf"},
		{"hf://owner/repo/model.safetensors", "does not name a .gguf file"},
		{"hf://-owner/repo/m.gguf", "starts or ends with '-' or '.'"},
		{"hf://owner/re--po/m.gguf", "contains '--' or '..'"},
		{"hf://owner/repo@main/m.gguf", `contains '@'`},
		{"hf://owner/repo/a//m.gguf", "empty path segment"},
		{"hf://owner/repo/../m.gguf", `contains a ".." segment`},
		{"hf://" + strings.Repeat("o", 97) + "/repo/m.gguf", "is over 96 characters"},
		{"ollama://", "names no model"},
		{"ollama://qwen2:", "has an empty tag"},
		{"ollama://qwen2:1.5b:x", "more than one ':'"},
		{"ollama://registry.example.com/lib/qwen2:1.5b", "names a registry host"},
		{"ollama://ollama://qwen2", "contains a second scheme"},
		{"ollama://qw en2:1.5b", "contains a space"},
		{"ollama://-qwen:1", "Ollama names use letters"},
		{"ollama://qwen:" + strings.Repeat("t", 81), "is over 80 characters"},
		{"hailo://", "names no model"},
		{"hailo://Qwen2:1.5b", `hailo source "hailo://Qwen2:1.5b": model names are lower case (hailo://qwen2:1.5b)`},
		{"hailo://qwen2", "has no tag; hailo sources name a model of Hailo's zoo as name:tag"},
		{"hailo://qwen2 :1.5b", "contains a space"},
		{"hailo://models/qwen2:1.5b", "is a path"},
		{"hailo://https://x:1", "contains a scheme inside"},
		{"hailo://" + strings.Repeat("q", 60) + ":1.5b", "the limit is 64"},
		{"hailo://:1.5b", "has an empty name"},
		{"hailo://qwen2:", "has an empty tag"},
		{"hailo://qwen2:1.5b:x", "more than one ':'"},
		{"hailo://qwen2:1.5b!", `contains '!'`},
		{"hailo://.qwen:1", "start with a letter or digit"},
	}
	for _, c := range cases {
		t.Run(c.in[:min(len(c.in), 60)], func(t *testing.T) {
			_, err := Parse(c.in)
			requireCode(t, err, api.CodeInvalidSource, c.msg)
		})
	}
}

func requireCode(t *testing.T, err error, code api.Code, msg string) {
	t.Helper()
	require.Error(t, err)
	var ae *api.Error
	require.True(t, errors.As(err, &ae), "error %v is not an *api.Error", err)
	assert.Equal(t, code, ae.Code)
	assert.Contains(t, ae.Message, msg)
}

func TestLongSourceIsShortenedInMessages(t *testing.T) {
	in := "/" + strings.Repeat("é", 500) + ".txt"
	_, err := Parse(in)
	require.Error(t, err)
	assert.Less(t, len(err.Error()), 400)
	assert.True(t, utf8.ValidString(err.Error()))
}

func TestRuntime(t *testing.T) {
	cases := []struct {
		in   string
		want api.Runtime
	}{
		{"/m/a.gguf", api.RuntimeLlamaServer},
		{"https://h/a.gguf", api.RuntimeLlamaServer},
		{"hf://o/r/a.gguf", api.RuntimeLlamaServer},
		{"ollama://qwen2:1.5b", api.RuntimeOllama},
		{"hailo://qwen2:1.5b", api.RuntimeHailoOllama},
		// The scheme is case-insensitive: the console's own copy of this rule was not.
		{"OLLAMA://qwen2:1.5b", api.RuntimeOllama},
		{"Hailo://qwen2:1.5b", api.RuntimeHailoOllama},
		{"FILE:///m/a.gguf", api.RuntimeLlamaServer},
	}
	for _, c := range cases {
		s, err := Parse(c.in)
		require.NoError(t, err)
		assert.Equal(t, c.want, s.Runtime(), c.in)
		assert.Equal(t, c.want, RuntimeOf(c.in), c.in)
		assert.NoError(t, s.CheckRuntime(c.want))
		assert.NoError(t, s.CheckRuntime(""), "the empty runtime is the default")
	}
}

// TestRuntimeOfUnparsed: a source still being typed, or one no agent has validated, is routed
// by its scheme alone.
func TestRuntimeOfUnparsed(t *testing.T) {
	for in, want := range map[string]api.Runtime{
		"":               api.RuntimeLlamaServer,
		"  ollama://":    api.RuntimeOllama,
		"hailo://Qwen 2": api.RuntimeHailoOllama,
		"qwen2:1.5b":     api.RuntimeLlamaServer,
		"ftp://x":        api.RuntimeLlamaServer,
	} {
		assert.Equal(t, want, RuntimeOf(in), "%q", in)
	}
}

func TestCheckRuntimeRefuses(t *testing.T) {
	cases := []struct {
		src string
		rt  api.Runtime
		msg string
	}{
		{"hailo://qwen2:1.5b", api.RuntimeOllama, "only hailo-ollama runs"},
		{"hailo://qwen2:1.5b", api.RuntimeLlamaServer, "cannot run on llama-server"},
		{"ollama://qwen2:1.5b", api.RuntimeHailoOllama, "hailo-ollama serves only Hailo's zoo"},
		{"ollama://qwen2:1.5b", api.RuntimeLlamaServer, "pulled and run by an Ollama daemon"},
		{"/m/a.gguf", api.RuntimeOllama, "GGUF sources run on llama-server (importing a GGUF into Ollama is not supported)"},
		{"hf://o/r/a.gguf", api.RuntimeHailoOllama, "cannot run on hailo-ollama"},
		{"/m/a.gguf", "vllm", `unknown runtime "vllm"`},
	}
	for _, c := range cases {
		s, err := Parse(c.src)
		require.NoError(t, err)
		requireCode(t, s.CheckRuntime(c.rt), api.CodeRuntimeMismatch, c.msg)
	}
}

func TestRequireTLS(t *testing.T) {
	s, err := Parse("http://mirror.lan/m.gguf")
	require.NoError(t, err)
	requireCode(t, s.RequireTLS(), api.CodeInvalidSource, "uses plain http://")
	s, err = Parse("https://mirror.lan/m.gguf")
	require.NoError(t, err)
	assert.NoError(t, s.RequireTLS())
}

func TestHFURL(t *testing.T) {
	s, err := Parse("hf://Qwen/Qwen2-GGUF/sub dir/q4 #1.gguf")
	require.NoError(t, err)
	assert.Equal(t, "https://huggingface.co/Qwen/Qwen2-GGUF/resolve/main/sub%20dir/q4%20%231.gguf", s.HFURL(""))
	assert.Equal(t, "http://127.0.0.1:9/Qwen/Qwen2-GGUF/resolve/main/sub%20dir/q4%20%231.gguf", s.HFURL("http://127.0.0.1:9/"))
	assert.Equal(t, s.HFURL("http://b"), s.DownloadURL("http://b"))

	o, err := Parse("ollama://qwen2:1.5b")
	require.NoError(t, err)
	assert.Empty(t, o.HFURL(""))
	assert.Empty(t, o.DownloadURL(""))
	h, err := Parse("https://h/x.gguf")
	require.NoError(t, err)
	assert.Equal(t, "https://h/x.gguf", h.DownloadURL("ignored"))
	assert.True(t, h.IsGGUF())
	assert.False(t, o.IsGGUF())
}

// FuzzParse checks that Parse never panics, that every refusal is an InvalidSource *api.Error,
// and that an accepted source's canonical form parses back to the same source.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"/models/a.gguf", "file:///models/a.gguf", "file:///a%20b.gguf", "file://host/a.gguf",
		"https://example.com/a.gguf", "http://127.0.0.1:1/a.gguf?x=1", "https://u@h/a.gguf",
		"hf://o/r/a.gguf", "hf://o/r/d/e/a.gguf", "ollama://qwen2:1.5b", "ollama://llama3",
		"ollama://library/x:y", "ollama://u/m:t", "hailo://qwen2.5-instruct:1.5b",
		"hailo://deepseek_r1_distill_qwen:1.5b", "hailo://Qwen2:1.5b", "hailo://a b:c",
		"/a/../b.gguf", "", "qwen2:1.5b", "x://", "/%.gguf", "/a?b#c.gguf", "https://[::1]:80/a.gguf",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		s, err := Parse(in)
		if err != nil {
			var ae *api.Error
			if !errors.As(err, &ae) || ae.Code != api.CodeInvalidSource || ae.Message == "" {
				t.Fatalf("Parse(%q): error %v is not an InvalidSource *api.Error", in, err)
			}
			return
		}
		if s.Raw != in {
			t.Fatalf("Parse(%q).Raw = %q", in, s.Raw)
		}
		again, err := Parse(s.String())
		if err != nil {
			t.Fatalf("canonical form %q of %q does not parse: %v", s.String(), in, err)
		}
		again.Raw = s.Raw
		if again != s {
			t.Fatalf("canonical form %q of %q parses to %+v, want %+v", s.String(), in, again, s)
		}
		if s.ModelName() == "" {
			t.Fatalf("Parse(%q) has no model name", in)
		}
		if s.CheckRuntime(s.Runtime()) != nil {
			t.Fatalf("Parse(%q) refuses its own default runtime", in)
		}
	})
}
