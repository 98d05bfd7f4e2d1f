package simserver

import (
	"encoding/json"
	"errors"
	"strings"
)

// ContentText is an OpenAI message's content as the simulated engines read it: absent or null is
// empty, a string is itself, and an array of parts is the text of its "text" parts, the others
// (images) skipped. shape is the engine's own error for anything else.
func ContentText(raw json.RawMessage, shape string) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New(shape)
	}
	var b strings.Builder
	for _, p := range parts {
		if p.Type == "text" {
			b.WriteString(p.Text)
		}
	}
	return b.String(), nil
}
