package agent

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmkube/mesh/agent/api"
)

// What a caller sends is echoed in a refusal only so far: a 30,000-character namespace in a
// token or in a placement request gives a short error, not a 30 kB one (issue 42).
func TestRefusalsClipWhatTheyEcho(t *testing.T) {
	s := serve(t, newBareAgent(t, "x86-nvidia", nil), nil)
	long := strings.Repeat("N", 30000)
	send := func(method, path, token, body string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, s.url+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b)
	}
	status, body := send("GET", "/v1/host", "llmk_ns_"+long+"_00", "")
	if status != http.StatusUnauthorized || len(body) > 512 || !strings.Contains(body, "NNNN…") {
		t.Errorf("a namespace token of a 30,000-character namespace: %d, %d bytes: %.300s", status, len(body), body)
	}
	status, body = send("POST", "/v1/placements", s.admin.Token, `{"source":"/m/x.gguf","namespace":"`+long+`"}`)
	if status != http.StatusBadRequest || len(body) > 512 || !strings.Contains(body, "NNNN…") {
		t.Errorf("a placement into a 30,000-character namespace: %d, %d bytes: %.300s", status, len(body), body)
	}
	if got := api.Clip("ééé", 3); got != "é…" {
		t.Errorf("Clip cuts on a rune boundary: %q", got)
	}
}
