package dialect

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestContentText pins the one reading of OpenAI content both dialects had a copy of: the
// Responses copy read an object ({}) as empty text where Chat Completions refused it.
func TestContentText(t *testing.T) {
	chat := func(raw string) (string, error) {
		text, _, err := oaMessage{Content: json.RawMessage(raw)}.parts(&images{})
		return text, err
	}
	for raw, want := range map[string]string{
		``: "", `null`: "", `""`: "", `[]`: "", `"hi"`: "hi",
		`[{"type":"text","text":"a"},{"type":"text","text":"b"}]`: "ab",
	} {
		got, err := chat(raw)
		require.NoError(t, err, raw)
		assert.Equal(t, want, got, raw)
		got, err = respText(json.RawMessage(raw))
		require.NoError(t, err, raw)
		assert.Equal(t, want, got, raw)
	}
	got, err := respText(json.RawMessage(`[{"type":"input_text","text":"q"},{"type":"output_text","text":"a"}]`))
	require.NoError(t, err)
	assert.Equal(t, "qa", got)

	_, err = chat(`[{"type":"input_text","text":"q"}]`)
	assert.EqualError(t, err, `content part of type "input_text" is not supported here: only text is taken`)
	_, err = respText(json.RawMessage(`[{"type":"input_image","image_url":"x"}]`))
	assert.EqualError(t, err, `content part of type "input_image" is not supported here: only text is taken`)
	_, err = chat(`{}`)
	assert.EqualError(t, err, "message content must be a string or an array of content parts")
	_, err = respText(json.RawMessage(`{}`))
	assert.EqualError(t, err, "content must be a string or an array of input_text parts")
	_, err = respText(json.RawMessage(`7`))
	assert.Error(t, err)
}
