package hailo

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func version(v string, models ...string) func(*Config) {
	return func(c *Config) { c.Version, c.Preloaded, c.FinalChunks = v, models, true }
}

func TestVersionsAnswerTheirOwnVersionAndZoo(t *testing.T) {
	for _, c := range []struct {
		version, api, list string
	}{
		{"5.1.1", "0.5.1", `["deepseek_r1_distill_qwen:1.5b","llama3.2:3b","qwen2.5-coder:1.5b","qwen2.5-instruct:1.5b","qwen2:1.5b"]`},
		{"5.3.0", "5.3.0", `["deepseek_r1:1.5b","llama3.2:1b","qwen2.5-coder:1.5b","qwen2.5:1.5b","qwen2:1.5b","qwen3:1.7b"]`},
		{"5.4", "5.4.0", `["deepseek_r1:1.5b","llama3.2:1b","qwen2.5-coder:1.5b","qwen2.5:1.5b","qwen2:1.5b","qwen3:1.7b"]`},
	} {
		s := start(t, version(c.version))
		_, body := do(t, "GET", s.URL()+"/api/version", "", "")
		assert.JSONEq(t, `{"version":"`+c.api+`"}`, string(body), c.version)
		_, body = do(t, "GET", s.URL()+"/hailo/v1/list", "", "")
		assert.JSONEq(t, `{"models":`+c.list+`}`, string(body), c.version)
	}
}

func TestRenamedModelsShareTheirHEF(t *testing.T) {
	// The library serves a release's own name for a shared file: 5.3.0's qwen2.5:1.5b is
	// 5.1.1's qwen2.5-instruct:1.5b.
	s := start(t, func(c *Config) { c.Version = "5.3.0"; c.FilenameManifests = []string{"qwen2.5:1.5b"} })
	resp, body := do(t, "GET", s.LibraryURL()+"/v5.4.0/blob/Qwen2.5-1.5B-Instruct.sha256", "", "")
	require.Equal(t, 200, resp.StatusCode)
	assert.Equal(t, HEFDigest("qwen2.5:1.5b", 4096)+"  Qwen2.5-1.5B-Instruct.hef\n", string(body))
	_, body = postJSON(t, s.URL()+"/api/pull", `{"model":"qwen2.5-instruct:1.5b"}`)
	assert.Contains(t, string(body), "not found", "5.3.0 no longer knows the old name")
}

const toolsChat = `{"model":%q,"stream":false,"messages":[{"role":"user","content":"weather?"}],"tools":[{"type":"function","function":{"name":"get_weather","parameters":{}}}]}`

func chatWithTools(t *testing.T, s *Server, model string) (int, map[string]any) {
	t.Helper()
	resp, body := postJSON(t, s.URL()+"/api/chat", strings.Replace(toolsChat, "%q", `"`+model+`"`, 1))
	return resp.StatusCode, decodeJSON(t, body)
}

func TestToolsByTemplate(t *testing.T) {
	// 5.1.1 has no tools field: it answers in free text as though none were offered.
	old := start(t, version("5.1.1", "qwen2:1.5b"))
	code, body := chatWithTools(t, old, "qwen2:1.5b")
	require.Equal(t, 200, code)
	assert.NotEmpty(t, body["message"].(map[string]any)["content"])
	assert.Nil(t, body["message"].(map[string]any)["tool_calls"])

	for _, v := range []string{"5.3.0", "5.4"} {
		s := start(t, version(v, "qwen2:1.5b", "qwen2.5:1.5b"))
		// A template without a tools branch: the engine's own refusal.
		code, body = chatWithTools(t, s, "qwen2:1.5b")
		assert.Equal(t, 400, code, v)
		assert.Contains(t, body["error"], "does not support tools", v)

		// One with it: the call comes back parsed.
		code, body = chatWithTools(t, s, "qwen2.5:1.5b")
		require.Equal(t, 200, code, v)
		calls := body["message"].(map[string]any)["tool_calls"].([]any)
		require.Len(t, calls, 1, v)
		assert.Equal(t, "get_weather", calls[0].(map[string]any)["function"].(map[string]any)["name"], v)

		// /api/show shows which template has the branch.
		_, show := postJSON(t, s.URL()+"/api/show", `{"model":"qwen2.5:1.5b"}`)
		assert.Contains(t, decodeJSON(t, show)["template"], "if tools", v)
		_, show = postJSON(t, s.URL()+"/api/show", `{"model":"qwen2:1.5b"}`)
		assert.NotContains(t, decodeJSON(t, show)["template"], "tools", v)
	}
}

func TestBackToBackLoadsDegradeOn530Only(t *testing.T) {
	chat := func(s *Server, model string) string {
		_, body := postJSON(t, s.URL()+"/api/chat", `{"model":"`+model+`","stream":false,"messages":[{"role":"user","content":"hi"}]}`)
		return decodeJSON(t, body)["message"].(map[string]any)["content"].(string)
	}
	for _, c := range []struct {
		version string
		degrade bool
	}{{"5.1.1", false}, {"5.3.0", true}, {"5.4", false}} {
		s := start(t, version(c.version, "qwen2:1.5b", "qwen2.5-coder:1.5b"))
		first := chat(s, "qwen2:1.5b")
		assert.NotContains(t, first, DegradedMarker, "the first load of a process is clean")
		assert.False(t, s.Stats().Degraded)

		second := chat(s, "qwen2.5-coder:1.5b")
		assert.Equal(t, c.degrade, strings.HasPrefix(second, DegradedMarker), c.version)
		assert.Equal(t, c.degrade, s.Stats().Degraded, c.version)
		// It stays: swapping back does not clear it, only a new process does.
		assert.Equal(t, c.degrade, strings.HasPrefix(chat(s, "qwen2:1.5b"), DegradedMarker), c.version)
	}
}

func TestBindSettingPerVersion(t *testing.T) {
	home := t.TempDir()
	env := map[string]string{"OLLAMA_HOST": "127.0.0.1:18000"}
	getenv := func(k string) string { return env[k] }

	// 5.3 and later read OLLAMA_HOST and not the JSON.
	writeJSONConfig(t, home, `{"server":{"host":"127.0.0.1","port":8000}}`)
	addr, from, ok, err := BindSetting("5.3.0", getenv, home)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "127.0.0.1:18000", addr)
	assert.Equal(t, "OLLAMA_HOST", from)

	for in, want := range map[string]string{"http://0.0.0.0:8001": "0.0.0.0:8001", "0.0.0.0": "0.0.0.0:8000", "[::1]:9": "[::1]:9"} {
		env["OLLAMA_HOST"] = in
		addr, _, _, err = BindSetting("5.4", getenv, home)
		require.NoError(t, err)
		assert.Equal(t, want, addr, in)
	}
	env["OLLAMA_HOST"] = ""
	_, _, ok, err = BindSetting("5.3.0", getenv, home)
	require.NoError(t, err)
	assert.False(t, ok, "the JSON does not count on 5.3: it would bind "+DefaultBind)

	// 5.1.1 reads the JSON and not OLLAMA_HOST.
	env["OLLAMA_HOST"] = "127.0.0.1:18000"
	addr, from, ok, err = BindSetting("5.1.1", getenv, home)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "127.0.0.1:8000", addr)
	assert.Contains(t, from, "hailo-ollama.json")
	_, _, ok, err = BindSetting("5.1.1", getenv, t.TempDir())
	require.NoError(t, err)
	assert.False(t, ok, "no JSON: 5.1.1 would bind "+DefaultBind)

	writeJSONConfig(t, home, `{"server":`)
	_, _, _, err = BindSetting("5.1.1", getenv, home)
	assert.ErrorContains(t, err, "hailo-ollama.json")
}

func writeJSONConfig(t *testing.T, home, body string) {
	t.Helper()
	dir := filepath.Join(home, "hailo-ollama")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "hailo-ollama.json"), []byte(body), 0o644))
}

func TestVersionSettingsAreChecked(t *testing.T) {
	cfg := FastConfig(t.TempDir())
	cfg.Version = "5.2.0"
	assert.ErrorContains(t, cfg.Validate(), "want one of 5.1.1, 5.3.0, 5.4.0")

	cfg.Version = "5.3.0"
	cfg.Preloaded = []string{"qwen2.5-instruct:1.5b"}
	assert.ErrorContains(t, cfg.Validate(), `preloaded model "qwen2.5-instruct:1.5b": not in the 5.3.0 zoo`)

	c, err := ConfigFromEnv(func(k string) string {
		return map[string]string{EnvVersion: "5.4", EnvDataDir: t.TempDir()}[k]
	}, DefaultConfig())
	require.NoError(t, err)
	assert.Equal(t, "5.4.0", c.Version)
}
