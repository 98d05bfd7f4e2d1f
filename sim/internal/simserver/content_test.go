package simserver

import (
	"encoding/json"
	"testing"
)

func TestContentText(t *testing.T) {
	for raw, want := range map[string]string{
		``: "", `null`: "", `"hi"`: "hi", `[]`: "",
		`[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"x"}},{"type":"text","text":"b"}]`: "ab",
	} {
		if got, err := ContentText(json.RawMessage(raw), "bad"); err != nil || got != want {
			t.Errorf("ContentText(%s) = %q, %v; want %q", raw, got, err, want)
		}
	}
	if _, err := ContentText(json.RawMessage(`{}`), "invalid message content type"); err == nil || err.Error() != "invalid message content type" {
		t.Errorf("an object: %v, want the engine's own error", err)
	}
}
