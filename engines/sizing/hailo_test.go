package sizing

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	simhailo "github.com/llmkube/mesh/sim/hailo"
)

const (
	qwen2Digest = "1111111111111111111111111111111111111111111111111111111111111111"
	qwen2Size   = 1_560_000_000
	qwen3File   = "Qwen3-1.7B-Instruct.hef"
	qwen3Size   = 1_790_000_000
)

func writeManifest(t *testing.T, dir, id, body string) {
	t.Helper()
	name, tag, _ := strings.Cut(id, ":")
	p := filepath.Join(dir, name, tag, "manifest.json")
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
	require.NoError(t, os.WriteFile(p, []byte(body), 0o644))
}

// library plays Hailo's model library: the 5.1.x digest form answers HEAD with a size and no
// body; the 5.4 form answers a one-byte range GET with 206 and the total. Every request is
// recorded.
func library(t *testing.T, versions ...string) (*httptest.Server, *[]string) {
	t.Helper()
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Method+" "+r.URL.Path+" "+r.Header.Get("Range"))
		switch {
		case r.URL.Path == "/blob/sha256_"+qwen2Digest && r.Method == http.MethodHead:
			w.Header().Set("Content-Length", "1560000000")
			w.WriteHeader(http.StatusOK)
			return
		case r.URL.Path == "/blob/sha256_"+strings.Repeat("2", 64):
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush() // headers out before any body: no Content-Length
			return
		}
		for _, v := range versions {
			if r.URL.Path == "/v"+v+"/blob/"+qwen3File && r.Header.Get("Range") == "bytes=0-0" {
				w.Header().Set("Content-Range", "bytes 0-0/1790000000")
				w.WriteHeader(http.StatusPartialContent)
				_, _ = w.Write([]byte{0})
				return
			}
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, &seen
}

func hailoFixture(t *testing.T) string {
	dir := t.TempDir()
	writeManifest(t, dir, "qwen2:1.5b", `{"hef_h10h":"`+qwen2Digest+`","template_params":{"bos_token":"","eos_token":"<|im_end|>"},"details":{"format":"hef","family":"qwen2","parameter_size":"1.5B","quantization_level":"Q4_0"}}`)
	writeManifest(t, dir, "qwen3:1.7b", `{"hef_filename":"`+qwen3File+`","license":null,"details":{"format":"hef","family":"qwen3"}}`)
	writeManifest(t, dir, "broken:1b", `{"hef_h10h": 42}`)
	writeManifest(t, dir, "nochunk:1b", `{"hef_h10h":"`+strings.Repeat("2", 64)+`"}`)
	writeManifest(t, dir, "gone:1b", `{"hef_h10h":"`+strings.Repeat("3", 64)+`"}`)
	return dir
}

func TestHailoDigestManifestByHEAD(t *testing.T) {
	lib, seen := library(t)
	s := &Sizer{Guard: allowLoopback(lib.Client()), HailoManifestsDir: hailoFixture(t), HailoLibraryURL: lib.URL}
	est, err := s.Estimate(context.Background(), parse(t, "hailo://qwen2:1.5b"), 0)
	require.NoError(t, err)
	assert.Equal(t, api.SizeEstimate{
		Bytes: qwen2Size, Weights: qwen2Size, Method: api.SizeHead, Device: api.DeviceHailo,
		Detail: "HEF 1.5 GiB (HEAD " + lib.URL + "/blob/sha256_" + qwen2Digest + ") in the Hailo-10H's own memory",
	}, est)
	assert.Equal(t, []string{"HEAD /blob/sha256_" + qwen2Digest + " "}, *seen)
}

func TestHailoFilenameManifestByRange(t *testing.T) {
	lib, seen := library(t, "5.4.0")
	s := &Sizer{Guard: allowLoopback(lib.Client()), HailoManifestsDir: hailoFixture(t), HailoLibraryURL: lib.URL + "/"}
	est, err := s.Estimate(context.Background(), parse(t, "hailo://qwen3:1.7b"), 0)
	require.NoError(t, err)
	assert.Equal(t, int64(qwen3Size), est.Bytes)
	assert.Equal(t, api.SizeRange, est.Method)
	assert.Equal(t, api.DeviceHailo, est.Device)
	assert.Contains(t, est.Detail, "range GET "+lib.URL+"/v5.4.0/blob/"+qwen3File)
	assert.Equal(t, []string{"GET /v5.4.0/blob/" + qwen3File + " bytes=0-0"}, *seen)
}

func TestHailoFilenameManifestFallsBackAVersion(t *testing.T) {
	lib, seen := library(t, "5.3.0")
	s := &Sizer{Guard: allowLoopback(lib.Client()), HailoManifestsDir: hailoFixture(t), HailoLibraryURL: lib.URL, HailoVersion: "5.4.0"}
	est, err := s.Estimate(context.Background(), parse(t, "hailo://qwen3:1.7b"), 0)
	require.NoError(t, err)
	assert.Equal(t, int64(qwen3Size), est.Bytes)
	assert.Contains(t, est.Detail, "/v5.3.0/blob/")
	assert.Len(t, *seen, 2)

	s.HailoVersion = "6.0.0" // no fallback across a major version
	_, err = s.Estimate(context.Background(), parse(t, "hailo://qwen3:1.7b"), 0)
	requireCode(t, err, api.CodeNotFound, "/v6.0.0/blob/"+qwen3File+": HTTP 404")
}

func TestHailoRefusals(t *testing.T) {
	lib, _ := library(t)
	dir := hailoFixture(t)
	s := &Sizer{Guard: allowLoopback(lib.Client()), HailoManifestsDir: dir, HailoLibraryURL: lib.URL}
	ctx := context.Background()

	_, err := s.Estimate(ctx, parse(t, "hailo://llama3.2:3b"), 0)
	requireCode(t, err, api.CodeNotFound, "hailo model llama3.2:3b is not in hailo-ollama's zoo; known models: broken:1b, gone:1b, nochunk:1b, qwen2:1.5b, qwen3:1.7b")

	_, err = s.Estimate(ctx, parse(t, "hailo://broken:1b"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "manifest is not a JSON object of the expected shape")

	_, err = s.Estimate(ctx, parse(t, "hailo://gone:1b"), 0)
	requireCode(t, err, api.CodeNotFound, "HEAD "+lib.URL+"/blob/sha256_"+strings.Repeat("3", 64)+": HTTP 404")

	_, err = s.Estimate(ctx, parse(t, "hailo://nochunk:1b"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "gave no Content-Length")

	empty := &Sizer{HailoManifestsDir: t.TempDir()}
	_, err = empty.Estimate(ctx, parse(t, "hailo://qwen2:1.5b"), 0)
	requireCode(t, err, api.CodeNotFound, "holds no manifests")

	missing := &Sizer{HailoManifestsDir: filepath.Join(dir, "nowhere")}
	_, err = missing.Estimate(ctx, parse(t, "hailo://qwen2:1.5b"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "manifests folder "+filepath.Join(dir, "nowhere")+" cannot be read")

	noData := &Sizer{Getenv: env(map[string]string{"XDG_DATA_HOME": filepath.Join(dir, "x"), "XDG_DATA_DIRS": filepath.Join(dir, "y")})}
	_, err = noData.Estimate(ctx, parse(t, "hailo://qwen2:1.5b"), 0)
	requireCode(t, err, api.CodeMemoryCheckFailed, "no hailo-ollama data folder (looked in "+filepath.Join(dir, "x", "hailo-ollama")+", "+filepath.Join(dir, "y", "hailo-ollama")+"); set --hailo-manifests-dir")
}

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestHailoManifestsDirLookup(t *testing.T) {
	root := t.TempDir()
	home, share1, share2 := filepath.Join(root, "home"), filepath.Join(root, "s1"), filepath.Join(root, "s2")
	require.NoError(t, os.MkdirAll(filepath.Join(share2, "hailo-ollama"), 0o755))

	got, err := HailoManifestsDir(env(map[string]string{"HOME": home, "XDG_DATA_DIRS": "relative/dir:" + share1 + ":" + share2}))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(share2, "hailo-ollama", "models", "manifests"), got)

	// ~/.local/share comes first when XDG_DATA_HOME is unset.
	require.NoError(t, os.MkdirAll(filepath.Join(home, ".local", "share", "hailo-ollama"), 0o755))
	got, err = HailoManifestsDir(env(map[string]string{"HOME": home, "XDG_DATA_DIRS": share2}))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(home, ".local", "share", "hailo-ollama", "models", "manifests"), got)

	// XDG_DATA_HOME replaces ~/.local/share.
	got, err = HailoManifestsDir(env(map[string]string{"HOME": home, "XDG_DATA_HOME": share1, "XDG_DATA_DIRS": share2}))
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(share2, "hailo-ollama", "models", "manifests"), got)

	// The defaults are /usr/share then /usr/local/share.
	_, err = HailoManifestsDir(env(map[string]string{"XDG_DATA_HOME": share1}))
	if err != nil {
		assert.Contains(t, err.Error(), "/usr/share/hailo-ollama, /usr/local/share/hailo-ollama")
	}
}

func TestDecodeHailoManifest(t *testing.T) {
	good := map[string]HailoManifest{
		`{"hef_h10h":"` + qwen2Digest + `"}`:                                {Digest: qwen2Digest},
		`{"hef_filename":"Qwen3-1.7B-Instruct.hef","license":null}`:         {Filename: qwen3File},
		`{"hef_h10h":"` + qwen2Digest + `","hef_filename":"A.hef"}`:         {Digest: qwen2Digest},
		"  {\"hef_filename\":\"x_y-1.5B.hef\",\"unknown\":[1,2,{}]}\n\n\t ": {Filename: "x_y-1.5B.hef"},
	}
	for in, want := range good {
		m, err := DecodeHailoManifest([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, want.Digest, m.Digest, in)
		assert.Equal(t, want.Filename, m.Filename, in)
	}
	bad := map[string]string{
		``:                   "not a JSON object",
		`[]`:                 "not a JSON object",
		`{"hef_h10h":"abc"}`: "is not a sha256 digest",
		`{"hef_h10h":"` + strings.ToUpper(qwen2Digest[:63]) + `A"}`: "is not a sha256 digest",
		`{}`: "names no HEF",
		`{"hef_filename":"../../etc/passwd.hef"}`:                 "is not a plain file name",
		`{"hef_filename":"model.bin"}`:                            "does not name a .hef file",
		`{"hef_filename":"a b.hef"}`:                              "contains a space",
		`{"hef_filename":"a%2f.hef"}`:                             "is not a plain file name",
		`{"hef_filename":".hef"}`:                                 "does not name a .hef file",
		`{"hef_h10h":"` + qwen2Digest + `"} {}`:                   "data after its JSON object",
		`{"details":"flat"}`:                                      "not a JSON object of the expected shape",
		`{"hef_filename":"` + strings.Repeat("a", 300) + `.hef"}`: "is too long",
	}
	for in, want := range bad {
		_, err := DecodeHailoManifest([]byte(in))
		require.Error(t, err, in)
		assert.Contains(t, err.Error(), want, in)
	}
	_, err := DecodeHailoManifest(make([]byte, maxManifest+1))
	assert.ErrorContains(t, err, "the limit is")
}

func FuzzDecodeHailoManifest(f *testing.F) {
	for _, s := range []string{
		`{"hef_h10h":"` + qwen2Digest + `"}`, `{"hef_filename":"Q.hef"}`, `{}`, `null`, `{"hef_h10h":null}`,
		`{"hef_filename":"a/b.hef"}`, `{"details":{"format":"hef"}}`, `{"hef_h10h":"` + qwen2Digest + `"}x`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := DecodeHailoManifest(data)
		if err != nil {
			return
		}
		if (m.Digest == "") == (m.Filename == "") {
			t.Fatalf("accepted manifest %q names %q and %q: want exactly one", data, m.Digest, m.Filename)
		}
		if m.Digest != "" && !isSHA256Hex(m.Digest) {
			t.Fatalf("accepted digest %q", m.Digest)
		}
		if m.Filename != "" && (badHEFName(m.Filename) != "" || strings.ContainsAny(m.Filename, "/\\")) {
			t.Fatalf("accepted file name %q", m.Filename)
		}
	})
}

func TestFallbackVersion(t *testing.T) {
	for in, want := range map[string]string{"5.4.2": "5.4.0", "5.4.0": "5.3.0", "5.0.0": "", "x": "", "5.4": "", "5.-1.0": ""} {
		got, ok := fallbackVersion(in)
		assert.Equal(t, want, got, in)
		assert.Equal(t, want != "", ok, in)
	}
}

// The hailo-ollama simulator's own data folder and library: the sizer finds the manifests by
// hailo-ollama's XDG lookup and reads the sizes without downloading a HEF.
func TestHailoAgainstSimulator(t *testing.T) {
	data := t.TempDir()
	cfg := simhailo.FastConfig(filepath.Join(data, "hailo-ollama"))
	cfg.HEFSize = 3 << 20
	cfg.FilenameManifests = []string{"llama3.2:3b"}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sim, err := simhailo.Start(ctx, cfg, nil)
	require.NoError(t, err)
	t.Cleanup(func() { sim.Close() })

	s := &Sizer{
		Guard:           allowLoopback(nil),
		HailoLibraryURL: sim.LibraryURL(),
		HailoVersion:    cfg.LibraryVersion,
		Getenv:          env(map[string]string{"XDG_DATA_HOME": data, "XDG_DATA_DIRS": "/nonexistent"}),
	}
	for _, id := range simhailo.ZooModels() {
		est, err := s.Estimate(ctx, parse(t, "hailo://"+id), 0)
		require.NoError(t, err, id)
		assert.Equal(t, cfg.HEFSize, est.Bytes, id)
		assert.Equal(t, api.DeviceHailo, est.Device, id)
		want := api.SizeHead
		if id == "llama3.2:3b" {
			want = api.SizeRange
		}
		assert.Equal(t, want, est.Method, id)
	}
	st := sim.Stats()
	assert.LessOrEqual(t, st.LibraryBytes, int64(1), "only the one-byte range may carry a body")
	assert.Zero(t, st.Pulls)

	_, err = s.Estimate(ctx, parse(t, "hailo://qwen3:1.7b"), 0)
	requireCode(t, err, api.CodeNotFound, "known models: deepseek_r1_distill_qwen:1.5b, llama3.2:3b, qwen2.5-coder:1.5b, qwen2.5-instruct:1.5b, qwen2:1.5b")
}
