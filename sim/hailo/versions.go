package hailo

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Releases the simulator can play (Config.Version, HAILO_SIM_VERSION). Each one's recorded
// differences, and where the public record is silent, are in docs/raspberry-pi-hailo.md
// ("What changed between hailo-ollama releases"); the table below is their one home in code.
const (
	Version511 = "5.1.1"
	Version530 = "5.3.0"
	Version54  = "5.4.0"
)

// release is what differs between hailo-ollama releases, as far as the record shows.
type release struct {
	// apiVersion is what GET /api/version answers. 5.1.1's source hard-codes "0.5.1" ("tools
	// might rely on this"). What 5.3.0 and 5.4 answer is not in the record the simulator was
	// built from: it answers the release number so a client's version gate can be exercised,
	// and a client must treat "0.5.1" as "5.1-era or unknown".
	apiVersion string
	// models is /hailo/v1/list: 5.1.1's tagged manifests folder; for 5.3.0 the models the
	// swap-degradation report (hailo-rpi5-examples #197, on 5.3.0) ran, plus qwen3:1.7b, which
	// issue 47 dates from 5.3.0 (the index holds its manifest only at the 5.4.0 commit).
	// llama3.2:3b is absent from the later manifests folder the index holds.
	models []string
	// bindFromEnv: the engine's address comes from OLLAMA_HOST (5.3.0's static_config.hpp
	// names OLLAMA_HOST_ENV_VAR); 5.1.1 reads the "server" object of hailo-ollama.json.
	bindFromEnv bool
	// toolsByTemplate: /api/chat takes "tools" and parses calls from the output with the chat
	// template's own wrapper (src/library/tool_parsers); a template without a tools branch is
	// a 400. 5.1.1 has no "tools" field: it drops them and answers in free text.
	toolsByTemplate bool
	// swapDegrades: loading a model after another one, in the same process, leaves the device
	// unreleased and the answers worse (hailo-rpi5-examples #197, open, filed on 5.3.0). Not
	// reported for 5.4 either way, so not simulated there.
	swapDegrades bool
}

var releases = map[string]release{
	Version511: {
		apiVersion: "0.5.1",
		models:     []string{"deepseek_r1_distill_qwen:1.5b", "llama3.2:3b", "qwen2.5-coder:1.5b", "qwen2.5-instruct:1.5b", "qwen2:1.5b"},
	},
	Version530: {
		apiVersion:      Version530,
		models:          []string{"deepseek_r1:1.5b", "llama3.2:1b", "qwen2.5-coder:1.5b", "qwen2.5:1.5b", "qwen2:1.5b", "qwen3:1.7b"},
		bindFromEnv:     true,
		toolsByTemplate: true,
		swapDegrades:    true,
	},
	Version54: {
		apiVersion:      Version54,
		models:          []string{"deepseek_r1:1.5b", "llama3.2:1b", "qwen2.5-coder:1.5b", "qwen2.5:1.5b", "qwen2:1.5b", "qwen3:1.7b"},
		bindFromEnv:     true,
		toolsByTemplate: true,
	},
}

// Versions lists the releases the simulator plays.
func Versions() []string { return []string{Version511, Version530, Version54} }

// NormalizeVersion accepts a release as "5.4" or "5.4.0" (and "v5.4.0") and returns its full
// number ("" is the default, 5.1.1), or an error naming the releases there are.
func NormalizeVersion(v string) (string, error) {
	v = strings.TrimPrefix(strings.TrimSpace(v), "v")
	if v == "" {
		return Version511, nil
	}
	if strings.Count(v, ".") == 1 {
		v += ".0"
	}
	if _, ok := releases[v]; !ok {
		return "", fmt.Errorf("no such hailo-ollama release; want one of %s", strings.Join(Versions(), ", "))
	}
	return v, nil
}

// ZooModelsOf lists the model names a release offers in /hailo/v1/list.
func ZooModelsOf(version string) []string {
	v, err := NormalizeVersion(version)
	if err != nil {
		return nil
	}
	return append([]string(nil), releases[v].models...)
}

// DefaultBind is hailo-ollama's own default address in every release (5.1.1's shipped JSON and
// 5.3.0's DEFAULT_SERVER_OLLAMA_CONNECTION): every interface.
const DefaultBind = "0.0.0.0:8000"

// EnvOllamaHost is the variable hailo-ollama 5.3 and later bind by.
const EnvOllamaHost = "OLLAMA_HOST"

// BindSetting returns the engine address version would bind on this host, and which setting
// said so: OLLAMA_HOST for 5.3 and later, the "server" object of
// <configHome>/hailo-ollama/hailo-ollama.json for 5.1.1. ok is false when the release's own
// setting is absent (it would bind DefaultBind); the other release's setting is ignored. That
// 5.1.1 ignores OLLAMA_HOST follows from its source; whether 5.3 still reads the JSON is not in
// the record, and the simulator assumes not: the case where a guide that edits only the JSON
// leaves the daemon on every interface. OLLAMA_HOST may be host, host:port or http://host:port; the port
// defaults to 8000 (the record does not show how hailo-ollama parses it: this is Ollama's form).
func BindSetting(version string, getenv func(string) string, configHome string) (addr, from string, ok bool, err error) {
	v, err := NormalizeVersion(version)
	if err != nil {
		return "", "", false, err
	}
	if releases[v].bindFromEnv {
		raw := strings.TrimSpace(getenv(EnvOllamaHost))
		if raw == "" {
			return "", EnvOllamaHost, false, nil
		}
		host := strings.TrimPrefix(strings.TrimPrefix(raw, "http://"), "https://")
		host = strings.TrimSuffix(host, "/")
		if _, _, splitErr := net.SplitHostPort(host); splitErr != nil {
			host = net.JoinHostPort(strings.Trim(host, "[]"), "8000")
		}
		return host, EnvOllamaHost, true, nil
	}
	path := filepath.Join(configHome, "hailo-ollama", "hailo-ollama.json")
	raw, readErr := os.ReadFile(path)
	if errors.Is(readErr, os.ErrNotExist) {
		return "", path, false, nil
	}
	if readErr != nil {
		return "", path, false, readErr
	}
	var f struct {
		Server *struct {
			Host string `json:"host"`
			Port int    `json:"port"`
		} `json:"server"`
	}
	if err := json.Unmarshal(raw, &f); err != nil {
		return "", path, false, fmt.Errorf("%s: %w", path, err)
	}
	if f.Server == nil || f.Server.Host == "" {
		return "", path + " server", false, nil
	}
	return net.JoinHostPort(f.Server.Host, strconv.Itoa(f.Server.Port)), path + " server", true, nil
}
