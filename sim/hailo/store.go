package hailo

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// The data folder, laid out as hailo-ollama's: models/manifests/<model>/<tag>/manifest.json and
// models/blob/sha256_<digest> (or models/blob/<file>.hef for the newer filename form).
const (
	manifestsDir = "models/manifests"
	blobDir      = "models/blob"
)

// manifest is what the store keeps of one manifest file. Exactly one of digest (5.1.1's
// hef_h10h) and hefFile (5.4's hef_filename) is set.
type manifest struct {
	name           string
	digest         string
	hefFile        string
	license        *string
	details        json.RawMessage
	bos, eos, chat string
	stops          []string
	style          promptStyle
	tools          bool // the template has a tools branch
}

// manifestFile is the on-disk form of both schemas.
type manifestFile struct {
	HEFH10H        string          `json:"hef_h10h,omitempty"`
	HEFFilename    string          `json:"hef_filename,omitempty"`
	TemplateParams *templateParams `json:"template_params,omitempty"`
	GenerationPar  *generationPar  `json:"generation_params,omitempty"`
	License        *string         `json:"license"`
	SystemPrompt   *string         `json:"system_prompt,omitempty"`
	Details        json.RawMessage `json:"details,omitempty"`
}

type templateParams struct {
	BOS          string `json:"bos_token"`
	EOS          string `json:"eos_token"`
	ChatTemplate string `json:"chat_template"`
}

type generationPar struct {
	StopTokens        []string `json:"stop_tokens"`
	RepetitionPenalty float64  `json:"repetition_penalty,omitempty"`
	Temperature       float64  `json:"temperature"`
	TopP              float64  `json:"top_p"`
	TopK              int      `json:"top_k,omitempty"`
}

type details struct {
	ParentModel       string   `json:"parent_model"`
	Format            string   `json:"format"`
	Family            string   `json:"family"`
	Families          []string `json:"families"`
	ParameterSize     string   `json:"parameter_size"`
	QuantizationLevel string   `json:"quantization_level"`
}

// store is the simulator's files: the library (what Hailo's server offers) and the data folder
// (what this host has). Manifests are read once, at start, as hailo-ollama does.
type store struct {
	dataDir    string
	libraryDir string
	hefSize    int64
	realSizes  bool // Config.RealSizes
	models     map[string]manifest
	// library: digest -> model, for the blobs the library listener serves.
	library map[string]string
	pullMu  sync.Mutex // one download at a time, so two pulls never share a .tmp file
}

func openStore(cfg Config) (*store, error) {
	st := &store{
		dataDir:    cfg.DataDir,
		libraryDir: cfg.LibraryDir,
		hefSize:    cfg.HEFSize,
		realSizes:  cfg.RealSizes,
		models:     map[string]manifest{},
		library:    map[string]string{},
	}
	if st.libraryDir == "" {
		st.libraryDir = filepath.Join(cfg.DataDir, "hailo-sim-library")
	}
	for _, d := range []string{st.libraryDir, filepath.Join(st.dataDir, manifestsDir), filepath.Join(st.dataDir, blobDir)} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	version, err := NormalizeVersion(cfg.Version)
	if err != nil {
		return nil, err
	}
	toolsByTemplate := releases[version].toolsByTemplate
	for _, z := range zooOf(version) {
		digest, err := st.writeLibraryBlob(z.name)
		if err != nil {
			return nil, fmt.Errorf("library blob for %s: %w", z.name, err)
		}
		st.library[digest] = z.name
		if err := st.writeManifest(z, digest, slices.Contains(cfg.FilenameManifests, z.name), toolsByTemplate); err != nil {
			return nil, fmt.Errorf("manifest for %s: %w", z.name, err)
		}
	}
	if err := st.scanManifests(); err != nil {
		return nil, err
	}
	for _, name := range cfg.Preloaded {
		if err := st.preload(name); err != nil {
			return nil, fmt.Errorf("preloading %s: %w", name, err)
		}
	}
	return st, nil
}

// writeLibraryBlob writes the model's fake HEF into the library and returns its digest.
func (st *store) writeLibraryBlob(model string) (string, error) {
	h := sha256.New()
	var digest string
	err := writeAtomic(filepath.Join(st.libraryDir, "pending.hef"), func(f *os.File) error {
		_, err := io.Copy(io.MultiWriter(f, h), hefContent(model, st.hefSize))
		digest = hex.EncodeToString(h.Sum(nil))
		return err
	})
	if err != nil {
		return "", err
	}
	return digest, os.Rename(filepath.Join(st.libraryDir, "pending.hef"), st.libraryPath(digest))
}

// reportedSize is the size the simulator reports for model's HEF whose file holds n bytes: the
// real HEF's with Config.RealSizes, else n.
func (st *store) reportedSize(model string, n int64) int64 {
	if z, ok := zooModel(model); ok && st.realSizes {
		return z.realHEFBytes
	}
	return n
}

func (st *store) libraryPath(digest string) string {
	return filepath.Join(st.libraryDir, "sha256_"+digest)
}

// writeManifest writes z's manifest; withTools gives a tool-capable model's template its tools
// branch, as the releases that read tools from the template have it.
func (st *store) writeManifest(z zooEntry, digest string, filenameForm, withTools bool) error {
	d, err := json.Marshal(details{Format: "hef", Family: z.family, Families: []string{z.family},
		ParameterSize: z.parameterSize, QuantizationLevel: "Q4_0"})
	if err != nil {
		return err
	}
	mf := manifestFile{Details: d}
	if filenameForm {
		mf.HEFFilename = z.hefFile
	} else {
		bos, eos, chat, stops := z.style.template()
		if withTools && z.tools {
			chat = toolsBranch + chat
		}
		mf.HEFH10H = digest
		mf.TemplateParams = &templateParams{BOS: bos, EOS: eos, ChatTemplate: chat}
		mf.GenerationPar = &generationPar{StopTokens: stops, RepetitionPenalty: z.repetition,
			Temperature: z.temperature, TopP: z.topP, TopK: z.topK}
	}
	body, err := json.MarshalIndent(mf, "", "    ")
	if err != nil {
		return err
	}
	model, tag, _ := strings.Cut(z.name, ":")
	path := filepath.Join(st.dataDir, manifestsDir, model, tag, "manifest.json")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writeFileAtomic(path, append(body, '\n'))
}

// scanManifests reads every manifests/<model>/<tag>/<file> as hailo-ollama does; a file that is
// not a manifest of either schema stops the start with its path.
func (st *store) scanManifests() error {
	root := filepath.Join(st.dataDir, manifestsDir)
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || strings.HasSuffix(path, ".tmp") {
			return err // a .tmp is an interrupted write of ours, not a manifest
		}
		tagDir := filepath.Dir(path)
		name := filepath.Base(filepath.Dir(tagDir)) + ":" + filepath.Base(tagDir)
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		m, err := parseManifest(name, raw)
		if err != nil {
			return fmt.Errorf("manifest %s: %w", path, err)
		}
		st.models[name] = m
		return nil
	})
}

func parseManifest(name string, raw []byte) (manifest, error) {
	var mf manifestFile
	if err := json.Unmarshal(raw, &mf); err != nil {
		return manifest{}, err
	}
	m := manifest{name: name, license: mf.License, details: mf.Details}
	switch {
	case mf.HEFH10H != "":
		if len(mf.HEFH10H) != 64 {
			return manifest{}, errors.New("hef_h10h is not a sha256 hex digest")
		}
		m.digest = mf.HEFH10H
	case mf.HEFFilename != "":
		if strings.ContainsAny(mf.HEFFilename, `/\`) || !strings.HasSuffix(mf.HEFFilename, ".hef") {
			return manifest{}, errors.New("hef_filename must be a bare name ending in .hef")
		}
		m.hefFile = mf.HEFFilename
	default:
		return manifest{}, errors.New("neither hef_h10h nor hef_filename")
	}
	if mf.TemplateParams != nil {
		m.bos, m.eos, m.chat = mf.TemplateParams.BOS, mf.TemplateParams.EOS, mf.TemplateParams.ChatTemplate
	}
	// Tools by template, as hailo-ollama 5.3 decides (minja's supports_tools: the template
	// reads "tools"). A filename-form manifest has no template here: the HEF carries it, so
	// the zoo's own flag stands in.
	z, known := zooModel(name)
	m.tools = strings.Contains(m.chat, "tools") || (mf.TemplateParams == nil && known && z.tools)
	if mf.GenerationPar != nil {
		m.stops = mf.GenerationPar.StopTokens
	}
	if known {
		m.style = z.style
	}
	return m, nil
}

// blobPath is where the model's HEF lives once downloaded.
func (st *store) blobPath(m manifest) string {
	if m.hefFile != "" {
		return filepath.Join(st.dataDir, blobDir, m.hefFile)
	}
	return filepath.Join(st.dataDir, blobDir, "sha256_"+m.digest)
}

// downloaded returns the model's manifest when its HEF is present, as every hailo-ollama route
// but pull and delete requires.
func (st *store) downloaded(name string) (manifest, os.FileInfo, bool) {
	m, ok := st.models[name]
	if !ok {
		return manifest{}, nil, false
	}
	fi, err := os.Stat(st.blobPath(m))
	if err != nil || !fi.Mode().IsRegular() {
		return manifest{}, nil, false
	}
	return m, fi, true
}

func (st *store) names() []string {
	out := make([]string, 0, len(st.models))
	for n := range st.models {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

func (st *store) preload(name string) error {
	m, ok := st.models[name]
	if !ok {
		return errors.New("no manifest")
	}
	digest := m.digest
	if digest == "" {
		digest = HEFDigest(name, st.hefSize)
	}
	if ok, err := fileHasDigest(st.blobPath(m), digest); err != nil || ok {
		return err
	}
	src, err := os.Open(st.libraryPath(digest))
	if err != nil {
		return err
	}
	defer src.Close()
	tmp := st.blobPath(m) + ".tmp"
	if err := writeAtomic(tmp, func(f *os.File) error { _, err := io.Copy(f, src); return err }); err != nil {
		return err
	}
	return os.Rename(tmp, st.blobPath(m))
}

// fileHasDigest tells whether path exists with the given sha256; a file with another digest is
// removed, as hailo-ollama does before downloading again.
func fileHasDigest(path, digest string) (bool, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	h := sha256.New()
	_, err = io.Copy(h, f)
	f.Close()
	if err != nil {
		return false, err
	}
	if hex.EncodeToString(h.Sum(nil)) == digest {
		return true, nil
	}
	return false, os.Remove(path)
}

// pullEvent is one line of /api/pull progress, in hailo-ollama's shape.
type pullEvent struct {
	Status    string `json:"status"`
	Digest    string `json:"digest,omitempty"`
	Total     *int64 `json:"total,omitempty"`
	Completed *int64 `json:"completed,omitempty"`
}

// progressEvery is how many bytes pass between two "pulling" lines (hailo-ollama reports every
// thousandth write); the last byte always gets one, so short downloads report too.
const progressEvery = 1 << 20

// pull makes m's HEF present, fetching it from the library at libraryURL the way hailo-ollama
// 5.1.1 does: an existing blob with the right hash is kept; otherwise GET
// <library>/blob/sha256_<digest> into <blob>.tmp, rename, verify. For a manifest in the newer
// filename form it asks /v<version>/blob/<file> and its .sha256 companion instead. downloaded
// is called when bytes are actually fetched (a cache hit fetches none).
func (st *store) pull(ctx context.Context, client *http.Client, libraryURL, version string, m manifest,
	emit func(pullEvent) error, downloaded func()) error {
	st.pullMu.Lock()
	defer st.pullMu.Unlock()
	libraryURL = strings.TrimSuffix(libraryURL, "/")
	digest, src := m.digest, libraryURL+"/blob/sha256_"+m.digest
	if m.hefFile != "" {
		d, err := fetchCompanion(ctx, client, libraryURL, version, m.hefFile)
		if err != nil {
			return err
		}
		digest, src = d, libraryURL+"/v"+version+"/blob/"+m.hefFile
	}
	target := st.blobPath(m)
	ok, err := fileHasDigest(target, digest)
	if err != nil {
		return err
	}
	if ok {
		return emitDone(emit, m, version)
	}
	downloaded()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		// hailo-ollama 5.1.1 writes whatever came and then fails on the hash; say why instead.
		return fmt.Errorf("library answered %s for %s", resp.Status, src)
	}
	tmp := target + ".tmp"
	total := resp.ContentLength
	err = writeAtomic(tmp, func(f *os.File) error {
		var done, last int64
		buf := make([]byte, 64<<10)
		for {
			n, rerr := resp.Body.Read(buf)
			if n > 0 {
				if _, err := f.Write(buf[:n]); err != nil {
					return err
				}
				done += int64(n)
				if done-last >= progressEvery || done == total {
					last = done
					t, c := total, done
					if r := st.reportedSize(m.name, total); r != total && total > 0 {
						// In the reported size's terms: the same fraction of the real HEF.
						t, c = r, int64(float64(done)/float64(total)*float64(r))
						if done == total {
							c = r
						}
					}
					if err := emit(pullEvent{Status: "pulling", Digest: digest, Total: &t, Completed: &c}); err != nil {
						return err
					}
				}
			}
			if rerr == io.EOF {
				return nil
			}
			if rerr != nil {
				return rerr
			}
		}
	})
	if err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, target); err != nil {
		return err
	}
	if err := emit(pullEvent{Status: "verifying sha256 digest"}); err != nil {
		return err
	}
	ok, err = fileHasDigest(target, digest)
	if err != nil {
		return err
	}
	if !ok {
		return errors.New("bad hash")
	}
	return emitDone(emit, m, version)
}

func emitDone(emit func(pullEvent) error, m manifest, version string) error {
	if m.hefFile != "" {
		if err := emit(pullEvent{Status: "resolved_version: " + version}); err != nil {
			return err
		}
	}
	return emit(pullEvent{Status: "success"})
}

// fetchCompanion reads the sha256 companion of a 5.4-form HEF: "<hex>  <file>\n".
func fetchCompanion(ctx context.Context, client *http.Client, libraryURL, version, hefFile string) (string, error) {
	src := libraryURL + "/v" + version + "/blob/" + strings.TrimSuffix(hefFile, ".hef") + ".sha256"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return "", err
	}
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("library answered %s for %s", resp.Status, src)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1024))
	if err != nil {
		return "", err
	}
	fields := strings.Fields(string(body))
	if len(fields) == 0 || len(fields[0]) != 64 {
		return "", fmt.Errorf("companion %s holds no sha256 digest", src)
	}
	return fields[0], nil
}

// writeAtomic creates path, lets fill write it, and syncs it; on failure the file is removed.
// Callers rename it into place, so a reader never sees half a file.
func writeAtomic(path string, fill func(*os.File) error) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	err = fill(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
	}
	return err
}

// writeFileAtomic replaces path with data through a synced temporary file and a rename.
func writeFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := writeAtomic(tmp, func(f *os.File) error { _, err := f.Write(data); return err }); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
