package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// contentText is the text of an OpenAI content field, in Chat Completions' messages and the
// Responses API's items alike: absent or null is empty, a string is itself, and an array of
// parts is their texts joined, when every part's type is one of kinds. The engines take text
// only, so another part (an image, a file) is refused by its type rather than dropped. shape
// is the error for anything else.
func contentText(raw json.RawMessage, shape string, kinds ...string) (string, error) {
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
		if !slices.Contains(kinds, p.Type) {
			return "", fmt.Errorf("content part of type %q is not supported: the engines take text only", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}
