package dialect

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/llmkube/mesh/engines"
)

// contentText is the text of an OpenAI content field, in Chat Completions' messages and the
// Responses API's items alike: absent or null is empty, a string is itself, and an array of
// parts is their texts joined, when every part's type is one of kinds. Another part (an image
// where none is taken, a file) is refused by its type rather than dropped. shape is the error
// for anything else.
func contentText(raw json.RawMessage, shape string, kinds ...string) (string, error) {
	text, _, err := contentParts(raw, shape, nil, kinds...)
	return text, err
}

// contentParts is contentText that also takes image parts (Chat Completions' image_url, the
// Responses API's input_image; data URLs) into im, when im is not nil.
func contentParts(raw json.RawMessage, shape string, im *images, kinds ...string) (string, []engines.Image, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil, nil
	}
	var parts []struct {
		Type     string          `json:"type"`
		Text     string          `json:"text"`
		ImageURL json.RawMessage `json:"image_url"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", nil, errors.New(shape)
	}
	var b strings.Builder
	var imgs []engines.Image
	for _, p := range parts {
		switch {
		case slices.Contains(kinds, p.Type):
			b.WriteString(p.Text)
		case (p.Type == "image_url" || p.Type == "input_image") && im != nil:
			// {"url": …, "detail": …}, or the URL alone as the Responses API's input_image and
			// some chat clients send it.
			var u struct {
				URL string `json:"url"`
			}
			if json.Unmarshal(p.ImageURL, &u.URL) != nil {
				if err := json.Unmarshal(p.ImageURL, &u); err != nil {
					return "", nil, errors.New(`image_url must be {"url":"data:image/…;base64,…"}`)
				}
			}
			img, err := im.dataURL(u.URL)
			if err != nil {
				return "", nil, err
			}
			imgs = append(imgs, img)
		default:
			return "", nil, fmt.Errorf("content part of type %q is not supported here: only text is taken", p.Type)
		}
	}
	return b.String(), imgs, nil
}
