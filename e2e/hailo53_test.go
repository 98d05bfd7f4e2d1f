package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// The Pi runs hailo-sim as hailo-ollama 5.3.0 (startLAN), so the run covers what changed since
// 5.1.1 through the real programs: hailoModel is 5.1.1's name, which 5.3.0 lists as
// qwen2.5:1.5b, and 5.3.0 parses tool calls.
func init() {
	checks = append(checks, struct {
		name string
		run  func(ctx context.Context, t *testing.T, e *env, n note)
	}{"hailo-ollama 5.3.0 on the Pi", checkHailo53})
}

func checkHailo53(ctx context.Context, t *testing.T, e *env, n note) {
	var list struct{ Models []string }
	code, body, err := e.pi.get(ctx, hailoURL+"/hailo/v1/list", "")
	if err != nil || code != http.StatusOK || json.Unmarshal(body, &list) != nil {
		t.Fatalf("the Pi's hailo-sim list: %d %v %s", code, err, body)
	}
	if slices.Contains(list.Models, hailoModel) || !slices.Contains(list.Models, "qwen2.5:1.5b") {
		t.Fatalf("the Pi's hailo-sim is not 5.3.0: it lists %v", list.Models)
	}
	n("the Pi's hailo-ollama 5.3.0 lists %s as qwen2.5:1.5b; the placement made under the old name serves", hailoModel)

	// Tools through another host's gateway reach the Pi's daemon, which calls the tool.
	code, body, err = e.laptop.do(ctx, http.MethodPost, e.box.apiURL()+"/v1/chat/completions", e.admin, map[string]any{
		"model":    hailoModel,
		"messages": []map[string]string{{"role": "user", "content": "What is the weather in Oslo?"}},
		"tools": []map[string]any{{"type": "function", "function": map[string]any{
			"name": "get_weather", "parameters": map[string]any{"type": "object", "properties": map[string]any{}},
		}}},
	})
	if err != nil || code != http.StatusOK || !strings.Contains(string(body), `"tool_calls"`) || !strings.Contains(string(body), "get_weather") {
		t.Fatalf("a chat with tools on hailo-ollama 5.3.0 through box: %d %v %s", code, err, body)
	}
	n("a chat with tools through box: the Pi's model called get_weather")
}
