package dialect

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// Images in a chat, in every dialect: OpenAI's image_url parts (data URLs only: the gateway
// fetches nothing), Ollama's images (base64), Anthropic's image blocks (base64 sources). They
// reach an engine that reads them (engines.ImageReader: Ollama, whose vision models read them);
// for any other the request is refused, in the client's dialect, naming the model and why.

// maxImageBytes bounds the decoded bytes of the images one request carries: a few photos'
// worth, well inside the request body's own bound.
const maxImageBytes = 5 << 20

// imageTypes are the media types the engines' vision models decode.
var imageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// images collects a request's images, holding their total to maxImageBytes.
type images struct {
	total int
}

// add decodes one base64 image of mediaType ("" for Ollama's, which carry none).
func (im *images) add(mediaType, b64 string) (engines.Image, error) {
	if mediaType != "" && !slices.Contains(imageTypes, mediaType) {
		return engines.Image{}, fmt.Errorf("image of media type %q: want one of %s", mediaType, strings.Join(imageTypes, ", "))
	}
	data, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		return engines.Image{}, fmt.Errorf("an image is not valid base64: %v", err)
	}
	if im.total += len(data); im.total > maxImageBytes {
		return engines.Image{}, fmt.Errorf("the images of one request may take at most %d bytes (%d MiB) decoded", maxImageBytes, maxImageBytes>>20)
	}
	return engines.Image{MediaType: mediaType, Data: data}, nil
}

// ollama decodes Ollama's images: base64, without a media type.
func (im *images) ollama(b64 []string) ([]engines.Image, error) {
	var out []engines.Image
	for _, s := range b64 {
		img, err := im.add("", s)
		if err != nil {
			return nil, err
		}
		out = append(out, img)
	}
	return out, nil
}

// dataURL decodes an OpenAI image_url: a data URL with base64 data.
func (im *images) dataURL(url string) (engines.Image, error) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return engines.Image{}, fmt.Errorf("image_url %q: only data URLs (data:image/png;base64,…) are taken; the gateway does not fetch images", SanitizePath(url))
	}
	meta, data, ok := strings.Cut(rest, ",")
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isBase64 {
		return engines.Image{}, fmt.Errorf("image_url: a data URL must be base64 (data:image/png;base64,…)")
	}
	return im.add(mediaType, data)
}

// hasImages reports whether any message shows the model an image.
func hasImages(msgs []engines.Message) bool {
	for _, m := range msgs {
		if len(m.Images) > 0 {
			return true
		}
	}
	return false
}

// RefuseImages is the answer for images sent to a model whose engine cannot read them, or nil
// when it can.
func RefuseImages(c *Call, local engines.Driver, m engines.Model, p api.Placement) *Failure {
	if !hasImages(c.Req.Messages) {
		return nil
	}
	var why string
	if ir, ok := local.(engines.ImageReader); ok {
		err := ir.ReadsImages(m)
		if err == nil {
			return nil
		}
		why = err.Error()
	} else {
		switch p.Runtime {
		case api.RuntimeLlamaServer:
			why = "this agent starts llama-server without a projector (--mmproj), which reading images needs"
		case api.RuntimeHailoOllama:
			why = "hailo-ollama's models read text only"
		default:
			why = "its engine reads text only"
		}
	}
	return &Failure{Status: http.StatusBadRequest, Code: api.CodeBadRequest, OACode: "image_not_supported",
		Msg: fmt.Sprintf("model %q (%s on %s) cannot read images: %s; send text only, or use a vision model on Ollama (images up to %d MiB a request)",
			p.Model, p.Runtime, p.Host, why, maxImageBytes>>20)}
}
