package ollama

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const hexA = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

func TestParseName(t *testing.T) {
	for in, want := range map[string]Name{
		"qwen2:1.5b":                     {"library", "qwen2", "1.5b"},
		"qwen2":                          {"library", "qwen2", "latest"},
		"User/Model_x:v1.0-q4":           {"user", "model_x", "v1.0-q4"},
		"registry.ollama.ai/library/m:t": {"library", "m", "t"},
		"registry.ollama.ai/someone/m":   {"someone", "m", "latest"},
		"  llama3.2:3b  ":                {"library", "llama3.2", "3b"},
	} {
		got, err := ParseName(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, bad := range []string{"", ":", "a/b/c:t", "../x:t", "x:..", "x:", "a b:t", ".hidden", "x:t/../y", "ns/:t", "x:" + strings.Repeat("t", 129)} {
		_, err := ParseName(bad)
		assert.Error(t, err, "%q", bad)
	}
}

func TestParseRegistryPath(t *testing.T) {
	r, err := ParseRegistryPath("/v2/library/tiny/manifests/1")
	require.NoError(t, err)
	assert.Equal(t, RegistryRequest{Name: Name{"library", "tiny", "1"}}, r)

	r, err = ParseRegistryPath("/v2/library/tiny/blobs/sha256:" + hexA)
	require.NoError(t, err)
	assert.Equal(t, RegistryRequest{Name: Name{"library", "tiny", ""}, SHA256: hexA}, r)

	for _, bad := range []string{
		"/v2/", "/v2/tiny/manifests/1", "/v1/library/tiny/manifests/1", "/v2/library/tiny/manifests/1/x",
		"/v2/library/tiny/tags/list", "/v2/library/../manifests/1", "/v2/library/tiny/manifests/..",
		"/v2/library/tiny/blobs/" + hexA, "/v2/library/tiny/blobs/sha256:" + strings.ToUpper(hexA),
		"/v2/library/tiny/blobs/sha256:" + hexA[:63], "/v2/library/ti:ny/manifests/1", "/v2/library/tiny:1/blobs/sha256:" + hexA,
	} {
		_, err := ParseRegistryPath(bad)
		assert.Error(t, err, bad)
	}
}

// Whatever a path, the parser never names a file outside the models folder, nor a digest that
// is not one.
func FuzzParseRegistryPath(f *testing.F) {
	f.Add("/v2/library/tiny/manifests/1")
	f.Add("/v2/library/tiny/blobs/sha256:" + hexA)
	f.Add("/v2/../../etc/manifests/passwd")
	f.Add("/v2/a/b/blobs/sha256:")
	f.Fuzz(func(t *testing.T, p string) {
		r, err := ParseRegistryPath(p)
		if err != nil {
			return
		}
		dir := "/models"
		for _, file := range []string{ManifestFile(dir, Name{r.Name.Namespace, r.Name.Model, "t"}), BlobFile(dir, r.SHA256)} {
			rel, err := filepath.Rel(dir, file)
			if err != nil || !filepath.IsLocal(rel) {
				t.Fatalf("%q names %s, outside the models folder", p, file)
			}
		}
		if r.SHA256 == "" {
			if _, err := ParseName(r.Name.String()); err != nil {
				t.Fatalf("%q parsed to a manifest of %v, not a name: %v", p, r.Name, err)
			}
			rel, _ := filepath.Rel(dir, ManifestFile(dir, r.Name))
			if !filepath.IsLocal(rel) || strings.Count(rel, string(filepath.Separator)) != 4 {
				t.Fatalf("%q names the manifest %s", p, rel)
			}
		} else if _, err := ParseDigest("sha256:" + r.SHA256); err != nil {
			t.Fatalf("%q parsed to blob %q: %v", p, r.SHA256, err)
		}
	})
}

func TestParseManifest(t *testing.T) {
	good := `{"schemaVersion":2,"mediaType":"application/vnd.docker.distribution.manifest.v2+json",
	"config":{"mediaType":"application/vnd.docker.container.image.v1+json","digest":"sha256:` + hexA + `","size":10},
	"layers":[{"mediaType":"application/vnd.ollama.image.model","digest":"sha256:` + strings.Repeat("b", 64) + `","size":100}]}`
	m, err := ParseManifest([]byte(good))
	require.NoError(t, err)
	assert.Equal(t, []string{hexA, strings.Repeat("b", 64)}, m.Blobs())

	for name, bad := range map[string]string{
		"not JSON":        `{`,
		"no layer":        `{"config":{"digest":"sha256:` + hexA + `","size":1},"layers":[]}`,
		"bad digest":      strings.Replace(good, "sha256:"+hexA, "sha256:xyz", 1),
		"no digest":       `{"config":{"digest":"","size":1},"layers":[{"digest":"sha256:` + hexA + `","size":1}]}`,
		"negative size":   strings.Replace(good, `"size":100`, `"size":-1`, 1),
		"other algorithm": strings.Replace(good, "sha256:"+hexA, "sha512:"+hexA, 1),
		"too large":       `{"layers":[` + strings.Repeat(" ", MaxManifest) + `]}`,
	} {
		_, err := ParseManifest([]byte(bad))
		assert.Error(t, err, name)
	}
}

// The models folder's blobs are listed by the digest their names give; partial pulls, other
// names and an absent folder list nothing.
func TestBlobs(t *testing.T) {
	assert.Empty(t, Blobs(""))
	assert.Empty(t, Blobs(filepath.Join(t.TempDir(), "none")))
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "blobs"), 0o755))
	require.NoError(t, os.WriteFile(BlobFile(dir, hexA), []byte("abc"), 0o644))
	for _, other := range []string{"sha256-" + hexA + "-partial", "sha256-" + hexA[:10], "notes.txt", "sha256-" + strings.ToUpper(hexA)} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, "blobs", other), nil, 0o644))
	}
	assert.Equal(t, []Blob{{Path: BlobFile(dir, hexA), Size: 3, SHA256: hexA}}, Blobs(dir))

	n := Name{"library", "tiny", "1"}
	require.NoError(t, os.MkdirAll(filepath.Dir(ManifestFile(dir, n)), 0o755))
	require.NoError(t, os.WriteFile(ManifestFile(dir, n), []byte(`{"config":{"digest":"sha256:`+hexA+`"},"layers":[{"digest":"sha256:`+hexA+`","size":3}]}`), 0o644))
	_, m, err := ReadManifest(dir, n)
	require.NoError(t, err)
	assert.Len(t, m.Layers, 1)
	_, _, err = ReadManifest(dir, Name{"library", "tiny", "2"})
	assert.Error(t, err)
}
