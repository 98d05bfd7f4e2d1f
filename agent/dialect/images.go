package dialect

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
)

// Images in a chat, in every dialect: OpenAI's image_url parts (data URLs; http(s) URLs when
// the agent fetches images), Ollama's images (base64), Anthropic's image blocks (base64 sources;
// url sources likewise). They reach an engine that reads them (engines.ImageReader: Ollama,
// whose vision models read them; llama-server placed with a projector); for any other the request is refused, in the client's
// dialect, naming the model and why. A URL is fetched only by the agent that serves the
// request, once it knows the engine reads images (FetchImages), through the download guard.

// maxImageBytes bounds the decoded bytes of the images one request carries: a few photos'
// worth, well inside the request body's own bound.
const maxImageBytes = 5 << 20

// imageTypes are the media types the engines' vision models decode.
var imageTypes = []string{"image/png", "image/jpeg", "image/gif", "image/webp"}

// images collects a request's images, holding their total to maxImageBytes; remote collects
// the URLs of those to fetch (Call.RemoteImages).
type images struct {
	total  int
	remote *[]string
}

// errImageBytes refuses a request whose images are over maxImageBytes.
var errImageBytes = fmt.Errorf("the images of one request may take at most %d bytes (%d MiB) decoded", maxImageBytes, maxImageBytes>>20)

// pendingFetch is the media type of an image named by URL until FetchImages fetches it: no
// engine takes it (imageTypes has no such type).
const pendingFetch = "(to be fetched)"

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
		return engines.Image{}, errImageBytes
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

// dataURL decodes an OpenAI image_url: a data URL with base64 data, or an http(s) URL to fetch.
func (im *images) dataURL(url string) (engines.Image, error) {
	rest, ok := strings.CutPrefix(url, "data:")
	if !ok {
		return im.url(url)
	}
	meta, data, ok := strings.Cut(rest, ",")
	mediaType, isBase64 := strings.CutSuffix(meta, ";base64")
	if !ok || !isBase64 {
		return engines.Image{}, fmt.Errorf("image_url: a data URL must be base64 (data:image/png;base64,…)")
	}
	return im.add(mediaType, data)
}

// url takes an image named by an http(s) URL, to be fetched (FetchImages).
func (im *images) url(u string) (engines.Image, error) {
	if !strings.HasPrefix(u, "https://") && !strings.HasPrefix(u, "http://") {
		return engines.Image{}, fmt.Errorf("image URL %q: want a data URL (data:image/png;base64,…) or an http(s) URL", SanitizePath(u))
	}
	*im.remote = append(*im.remote, u)
	return engines.Image{MediaType: pendingFetch}, nil
}

// fetchTimeout bounds the fetch of one request's images.
const fetchTimeout = 30 * time.Second

// FetchImages fills the images c names by URL, fetched with get (the download guard's client:
// public addresses only, unless the operator allowed more), held with the request's other
// images to maxImageBytes; each must be 200 with an image media type the engines decode. With
// get nil (the agent's default) a request naming any is refused, saying what to send instead.
func FetchImages(ctx context.Context, c *Call, get *http.Client) *Failure {
	if len(c.RemoteImages) == 0 {
		return nil
	}
	refuse := func(url, why string) *Failure {
		return &Failure{Status: http.StatusBadRequest, Code: api.CodeBadRequest, OACode: "invalid_image_url",
			Msg: fmt.Sprintf("image %s: %s", SanitizePath(url), why)}
	}
	if get == nil {
		return refuse(c.RemoteImages[0], "this agent does not fetch images by URL (off unless its operator starts it with --fetch-image-urls); send the image itself, as a data URL (data:image/png;base64,…) or base64")
	}
	used := 0
	for _, m := range c.Req.Messages {
		for _, img := range m.Images {
			used += len(img.Data)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	next := 0
	for i := range c.Req.Messages {
		imgs := c.Req.Messages[i].Images
		for j := range imgs {
			if imgs[j].MediaType != pendingFetch {
				continue
			}
			url := c.RemoteImages[next]
			next++
			img, n, why := fetchImage(ctx, get, url, maxImageBytes-used)
			if why != "" {
				return refuse(url, why)
			}
			imgs[j], used = img, used+n
		}
	}
	return nil
}

// fetchImage GETs one image of at most room bytes; why says what was wrong, "" when nothing was.
func fetchImage(ctx context.Context, get *http.Client, url string, room int) (engines.Image, int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return engines.Image{}, 0, "not a URL the agent can fetch"
	}
	resp, err := get.Do(req)
	if err != nil {
		return engines.Image{}, 0, "could not be fetched: " + download.Redact(err).Error()
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return engines.Image{}, 0, fmt.Sprintf("could not be fetched: HTTP %d", resp.StatusCode)
	}
	mediaType, _, _ := strings.Cut(resp.Header.Get("Content-Type"), ";")
	mediaType = strings.ToLower(strings.TrimSpace(mediaType))
	if !slices.Contains(imageTypes, mediaType) {
		return engines.Image{}, 0, fmt.Sprintf("the server sent %q, not one of %s", SanitizePath(mediaType), strings.Join(imageTypes, ", "))
	}
	if resp.ContentLength > int64(room) {
		return engines.Image{}, 0, errImageBytes.Error()
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, int64(room)+1))
	switch {
	case err != nil:
		return engines.Image{}, 0, "could not be fetched: " + download.Redact(err).Error()
	case len(data) > room:
		return engines.Image{}, 0, errImageBytes.Error()
	}
	return engines.Image{MediaType: mediaType, Data: data}, len(data), ""
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
		case api.RuntimeHailoOllama:
			why = "hailo-ollama's models read text only"
		default:
			why = "its engine reads text only"
		}
	}
	return &Failure{Status: http.StatusBadRequest, Code: api.CodeBadRequest, OACode: "image_not_supported",
		Msg: fmt.Sprintf("model %q (%s on %s) cannot read images: %s; send text only, or use a vision model (on Ollama, or on llama-server placed with a projector) (images up to %d MiB a request)",
			p.Model, p.Runtime, p.Host, why, maxImageBytes>>20)}
}
