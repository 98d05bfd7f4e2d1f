// Package source parses and validates model sources — the strings a placement request names a
// model by — before anything else happens to them:
//
//	file:///abs/model.gguf   or   /abs/model.gguf     a local GGUF file          (llama-server)
//	https://host/path/model.gguf                       a GGUF file to download    (llama-server)
//	hf://owner/repo/path/model.gguf                    a GGUF file on Hugging Face (llama-server)
//	ollama://name:tag                                  a model of an Ollama registry (ollama)
//	hailo://name:tag                                   a HEF of Hailo's GenAI model zoo (hailo-ollama)
//
// A malformed source is an *api.Error with code InvalidSource whose message says what is wrong.
//
// Plain http:// is parsed (as KindHTTPS with Insecure set) because loopback and LAN mirrors
// speak it, but it is not trusted by default: RequireTLS refuses it, and the agent calls
// RequireTLS unless the operator explicitly allowed plain HTTP downloads.
package source

import (
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/llmkube/mesh/agent/api"
)

// Kind is a source's scheme.
type Kind string

const (
	KindFile   Kind = "file"
	KindHTTPS  Kind = "https"
	KindHF     Kind = "hf"
	KindOllama Kind = "ollama"
	KindHailo  Kind = "hailo"
)

// DefaultHFBase is where hf:// sources resolve unless the operator names a mirror.
const DefaultHFBase = "https://huggingface.co"

// Limits on what Parse accepts.
const (
	MaxLen        = 2048 // bytes in a whole source
	MaxHailoID    = 64   // characters in a hailo model id (name:tag); zoo ids are under 32
	MaxHFName     = 96   // characters in a Hugging Face owner or repo name (Hugging Face's own limit)
	MaxOllamaPart = 80   // characters in an Ollama namespace, model or tag (Ollama's own limit)
)

// Source is a parsed, validated model source. Only the fields of its Kind are set.
type Source struct {
	Raw  string // as given
	Kind Kind
	Path string // file: absolute, cleaned path
	URL  string // https: the URL, canonical form
	// Insecure marks an http:// URL (Kind is KindHTTPS): no TLS, refused by RequireTLS.
	Insecure          bool
	Owner, Repo, File string // hf: file may hold sub-folders ("Q4_K_M/x-00001-of-00002.gguf")
	Name, Tag         string // ollama, hailo; ollama's Name may carry a namespace ("user/model")
}

// Parse validates s and returns the source it names. Errors are *api.Error with code
// api.CodeInvalidSource.
func Parse(s string) (Source, error) {
	if s == "" {
		return Source{}, invalid("empty source; want file:///abs/model.gguf, https://…/model.gguf, hf://owner/repo/file.gguf, ollama://name:tag or hailo://name:tag")
	}
	if len(s) > MaxLen {
		return Source{}, invalid("source is %d bytes long; the limit is %d", len(s), MaxLen)
	}
	if why := badChars(s); why != "" {
		return Source{}, invalid("source %s %s", show(s), why)
	}
	if strings.TrimSpace(s) != s {
		return Source{}, invalid("source %s has leading or trailing spaces", show(s))
	}

	if strings.HasPrefix(s, "/") {
		return parseFilePath(s, s)
	}
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok || !validScheme(scheme) {
		return Source{}, noScheme(s)
	}
	switch strings.ToLower(scheme) {
	case "file":
		return parseFileURL(s)
	case "https", "http":
		return parseHTTP(s)
	case "hf":
		return parseHF(s, rest)
	case "ollama":
		return parseOllama(s, rest)
	case "hailo":
		return parseHailo(s, rest)
	}
	return Source{}, invalid("source %s: unknown scheme %q; want file://, https://, hf://, ollama:// or hailo://", show(s), scheme)
}

// noScheme explains a source that names no scheme.
func noScheme(s string) error {
	switch {
	case hasSuffixFold(s, ".gguf"):
		return invalid("source %s is a relative path; give an absolute path (/abs/model.gguf) or file:///abs/model.gguf", show(s))
	case strings.Contains(s, ":") && !strings.ContainsAny(s, "/\\ "):
		return invalid("source %s has no scheme; did you mean ollama://%s or hailo://%s?", show(s), s, s)
	}
	return invalid("source %s has no scheme; want file:///abs/model.gguf, https://…/model.gguf, hf://owner/repo/file.gguf, ollama://name:tag or hailo://name:tag", show(s))
}

func parseFileURL(s string) (Source, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Source{}, invalid("file source %s: %v", show(s), unwrapURLError(err))
	}
	if u.Host != "" {
		return Source{}, invalid("file source %s names host %q; a file URL names a local file: file:///abs/model.gguf", show(s), u.Host)
	}
	if u.User != nil {
		return Source{}, invalid("file source %s carries user information; want file:///abs/model.gguf", show(s))
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.Contains(s, "#") {
		return Source{}, invalid("file source %s has a query or fragment; percent-encode '?' (%%3F) and '#' (%%23) in file names", show(s))
	}
	if u.Path == "" {
		return Source{}, invalid("file source %s names no file; want file:///abs/model.gguf", show(s))
	}
	if why := badChars(u.Path); why != "" {
		return Source{}, invalid("file source %s: the decoded path %s", show(s), why)
	}
	return parseFilePath(s, u.Path)
}

// parseFilePath validates a local path p given as raw.
func parseFilePath(raw, p string) (Source, error) {
	if !strings.HasPrefix(p, "/") {
		return Source{}, invalid("file source %s is a relative path; give an absolute path", show(raw))
	}
	if strings.Contains(p, "\\") {
		return Source{}, invalid("file source %s contains a backslash; give a slash-separated absolute path", show(raw))
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return Source{}, invalid("file source %s contains a '..' segment; give the model's real absolute path", show(raw))
		}
	}
	if strings.HasSuffix(p, "/") {
		return Source{}, invalid("file source %s names a folder; give the path of a .gguf file", show(raw))
	}
	clean := path.Clean(p)
	if err := checkGGUFName("file", raw, path.Base(clean)); err != nil {
		return Source{}, err
	}
	return Source{Raw: raw, Kind: KindFile, Path: clean}, nil
}

func parseHTTP(s string) (Source, error) {
	u, err := url.Parse(s)
	if err != nil {
		return Source{}, invalid("https source %s: %v", show(s), unwrapURLError(err))
	}
	if u.Host == "" || u.Hostname() == "" {
		return Source{}, invalid("https source %s names no host", show(s))
	}
	if u.User != nil {
		return Source{}, invalid("https source %s carries credentials in the URL; credentials never travel inside a source", show(s))
	}
	if u.Fragment != "" || strings.Contains(s, "#") {
		return Source{}, invalid("https source %s has a fragment ('#…'), which a server never sees; remove it", show(s))
	}
	if u.Port() != "" {
		if n, err := strconv.Atoi(u.Port()); err != nil || n < 1 || n > 65535 || !allDigits(u.Port()) {
			return Source{}, invalid("https source %s has a bad port %q", show(s), u.Port())
		}
	}
	if why := badChars(u.Path); why != "" {
		return Source{}, invalid("https source %s: the decoded path %s", show(s), why)
	}
	if err := checkGGUFName("https", s, path.Base(u.Path)); err != nil {
		return Source{}, err
	}
	return Source{Raw: s, Kind: KindHTTPS, URL: u.String(), Insecure: u.Scheme == "http"}, nil
}

func parseHF(s, rest string) (Source, error) {
	parts := strings.Split(rest, "/")
	if len(parts) < 3 {
		return Source{}, invalid("hf source %s names no file; want hf://owner/repo/file.gguf", show(s))
	}
	owner, repo := parts[0], parts[1]
	if why := hfName(owner); why != "" {
		return Source{}, invalid("hf source %s: owner %q %s", show(s), owner, why)
	}
	if why := hfName(repo); why != "" {
		return Source{}, invalid("hf source %s: repo %q %s", show(s), repo, why)
	}
	files := parts[2:]
	for _, seg := range files {
		switch {
		case seg == "":
			return Source{}, invalid("hf source %s has an empty path segment ('//' or a trailing '/')", show(s))
		case seg == "." || seg == "..":
			return Source{}, invalid("hf source %s contains a %q segment; name the file's path inside the repo", show(s), seg)
		case strings.Contains(seg, "\\"):
			return Source{}, invalid("hf source %s contains a backslash; separate folders with '/'", show(s))
		}
	}
	if err := checkGGUFName("hf", s, files[len(files)-1]); err != nil {
		return Source{}, err
	}
	return Source{Raw: s, Kind: KindHF, Owner: owner, Repo: repo, File: strings.Join(files, "/")}, nil
}

// hfName says what is wrong with a Hugging Face owner or repo name, or "" when nothing is:
// letters, digits, '-', '_', '.'; not starting or ending with '-' or '.'; no '--' or '..';
// at most 96 characters (Hugging Face's rules for repo ids).
func hfName(n string) string {
	switch {
	case n == "":
		return "is empty"
	case len(n) > MaxHFName:
		return "is over " + strconv.Itoa(MaxHFName) + " characters"
	case strings.Contains(n, "--") || strings.Contains(n, ".."):
		return "contains '--' or '..'"
	case strings.HasPrefix(n, "-") || strings.HasPrefix(n, ".") || strings.HasSuffix(n, "-") || strings.HasSuffix(n, "."):
		return "starts or ends with '-' or '.'"
	}
	for _, r := range n {
		if !isASCIIAlnum(r) && r != '-' && r != '_' && r != '.' {
			return "contains " + strconv.QuoteRune(r) + "; Hugging Face names use letters, digits, '-', '_' and '.'"
		}
	}
	return ""
}

func parseOllama(s, rest string) (Source, error) {
	if rest == "" {
		return Source{}, invalid("ollama source %s names no model; want ollama://name:tag, e.g. ollama://qwen2:1.5b", show(s))
	}
	if strings.Contains(rest, "://") {
		return Source{}, invalid("ollama source %s contains a second scheme; give the model alone, e.g. ollama://qwen2:1.5b", show(s))
	}
	name, tag, hasTag := strings.Cut(rest, ":")
	if !hasTag {
		tag = "latest" // Ollama's own default
	} else if tag == "" {
		return Source{}, invalid("ollama source %s has an empty tag; write ollama://%s:latest or leave out the ':'", show(s), name)
	}
	if strings.Contains(tag, ":") {
		return Source{}, invalid("ollama source %s has more than one ':'; want ollama://name:tag", show(s))
	}
	if strings.Contains(tag, "/") {
		return Source{}, invalid("ollama source %s has a '/' in its tag %q", show(s), tag)
	}
	segs := strings.Split(name, "/")
	if len(segs) > 2 {
		return Source{}, invalid("ollama source %s names a registry host or a deep path; give [namespace/]name:tag (the registry is the agent's --ollama-registry)", show(s))
	}
	for _, seg := range segs {
		if why := ollamaPart(seg); why != "" {
			return Source{}, invalid("ollama source %s: name %q %s", show(s), seg, why)
		}
	}
	if why := ollamaPart(tag); why != "" {
		return Source{}, invalid("ollama source %s: tag %q %s", show(s), tag, why)
	}
	// library/x is the official namespace: the short form is canonical.
	name = strings.TrimPrefix(name, "library/")
	return Source{Raw: s, Kind: KindOllama, Name: name, Tag: tag}, nil
}

// ollamaPart applies Ollama's rules for a namespace, model or tag: a letter, digit or '_'
// first, then letters, digits, '_', '-' and '.', at most 80 characters.
func ollamaPart(p string) string {
	switch {
	case p == "":
		return "is empty"
	case len(p) > MaxOllamaPart:
		return "is over " + strconv.Itoa(MaxOllamaPart) + " characters"
	}
	for i, r := range p {
		switch {
		case unicode.IsSpace(r):
			return "contains a space"
		case isASCIIAlnum(r) || r == '_':
		case (r == '-' || r == '.') && i > 0:
		default:
			return "contains " + strconv.QuoteRune(r) + "; Ollama names use letters, digits, '_', '-' and '.', and start with a letter, digit or '_'"
		}
	}
	return ""
}

func parseHailo(s, id string) (Source, error) {
	const want = "hailo sources name a model of Hailo's zoo as name:tag, e.g. hailo://qwen2.5-instruct:1.5b"
	switch {
	case id == "":
		return Source{}, invalid("hailo source %s names no model; %s", show(s), want)
	case len(id) > MaxHailoID:
		return Source{}, invalid("hailo source %s: the model id is %d characters long; the limit is %d", show(s), len(id), MaxHailoID)
	case strings.Contains(id, "://"):
		return Source{}, invalid("hailo source %s contains a scheme inside; %s", show(s), want)
	case strings.ContainsAny(id, "/\\"):
		return Source{}, invalid("hailo source %s is a path; %s", show(s), want)
	case strings.IndexFunc(id, unicode.IsSpace) >= 0:
		return Source{}, invalid("hailo source %s contains a space; %s", show(s), want)
	case strings.ToLower(id) != id:
		return Source{}, invalid("hailo source %s: model names are lower case (hailo://%s)", show(s), strings.ToLower(id))
	}
	name, tag, ok := strings.Cut(id, ":")
	switch {
	case !ok:
		return Source{}, invalid("hailo source %s has no tag; %s", show(s), want)
	case name == "":
		return Source{}, invalid("hailo source %s has an empty name; %s", show(s), want)
	case tag == "":
		return Source{}, invalid("hailo source %s has an empty tag; %s", show(s), want)
	case strings.Contains(tag, ":"):
		return Source{}, invalid("hailo source %s has more than one ':'; %s", show(s), want)
	}
	for _, part := range [...]string{name, tag} {
		for i, r := range part {
			switch {
			case isASCIIAlnum(r):
			case (r == '.' || r == '_' || r == '-') && i > 0:
			default:
				return Source{}, invalid("hailo source %s: %q contains %s; zoo ids use a-z, 0-9, '.', '_' and '-', and start with a letter or digit", show(s), part, strconv.QuoteRune(r))
			}
		}
	}
	return Source{Raw: s, Kind: KindHailo, Name: name, Tag: tag}, nil
}

// checkGGUFName refuses a file name that is not a GGUF model.
func checkGGUFName(kind, raw, base string) error {
	if !hasSuffixFold(base, ".gguf") {
		return invalid("%s source %s does not name a .gguf file; %s sources are GGUF models for llama-server (use ollama:// or hailo:// for engine-managed models)", kind, show(raw), kind)
	}
	if len(base) == len(".gguf") {
		return invalid("%s source %s: the file name is only the extension", kind, show(raw))
	}
	return nil
}

// Runtime is the runtime a source runs on when the request names none.
func (s Source) Runtime() api.Runtime { return s.Kind.Runtime() }

// Runtime is the runtime sources of kind k run on: hailo:// on hailo-ollama, ollama:// on
// Ollama, every GGUF (a path, file://, https://, hf://) on llama-server.
func (k Kind) Runtime() api.Runtime {
	switch k {
	case KindOllama:
		return api.RuntimeOllama
	case KindHailo:
		return api.RuntimeHailoOllama
	}
	return api.RuntimeLlamaServer
}

// RuntimeOf is the runtime a source string runs on when the request names none, read from its
// scheme alone, case-insensitive as Parse reads it and ignoring surrounding spaces: for a source
// still being typed in the console, or one a ranking routes before an agent validates it. For
// every source Parse accepts it equals Source.Runtime.
func RuntimeOf(raw string) api.Runtime {
	scheme, _, ok := strings.Cut(strings.TrimSpace(raw), "://")
	if !ok {
		return api.RuntimeLlamaServer
	}
	return Kind(strings.ToLower(scheme)).Runtime()
}

// CheckRuntime refuses a runtime that cannot run the source (api.CodeRuntimeMismatch). The
// empty runtime means "the default" and is accepted. The rules are strict on purpose:
//   - hailo:// is a HEF, which only hailo-ollama runs (on a Hailo-10H).
//   - ollama:// runs only on Ollama: hailo-ollama serves only its own zoo, and llama-server has
//     no registry client.
//   - GGUF sources run only on llama-server. Ollama could import a GGUF through a Modelfile, but
//     that copies the weights into Ollama's store behind the agent's back (a second copy the
//     memory and disk accounting would not see), so it is not offered.
func (s Source) CheckRuntime(r api.Runtime) error {
	if r == "" {
		return nil
	}
	if !r.Valid() {
		return api.Errorf(api.CodeRuntimeMismatch, "unknown runtime %q; known runtimes: llama-server, ollama, hailo-ollama", string(r))
	}
	want := s.Runtime()
	if r == want {
		return nil
	}
	var why string
	switch s.Kind {
	case KindHailo:
		why = "hailo:// models are HEF files for a Hailo-10H, which only hailo-ollama runs"
	case KindOllama:
		why = "ollama:// models are pulled and run by an Ollama daemon"
		if r == api.RuntimeHailoOllama {
			why += "; hailo-ollama serves only Hailo's zoo (use hailo://name:tag)"
		}
	default:
		why = "GGUF sources run on llama-server (importing a GGUF into Ollama is not supported)"
	}
	return api.Errorf(api.CodeRuntimeMismatch, "source %s cannot run on %s: %s", s.String(), r, why)
}

// RequireTLS refuses a plain http:// source. The agent calls it unless the operator allowed
// plain HTTP (a LAN mirror, a test server on loopback).
func (s Source) RequireTLS() error {
	if s.Insecure {
		return api.Errorf(api.CodeInvalidSource, "source %s uses plain http://; use https://, or allow plain HTTP downloads explicitly", show(s.URL))
	}
	return nil
}

// IsGGUF reports whether the source is a GGUF file (file, https or hf).
func (s Source) IsGGUF() bool {
	return s.Kind == KindFile || s.Kind == KindHTTPS || s.Kind == KindHF
}

// ModelName is the name the gateway serves the model under by default: the GGUF file's name
// without ".gguf", or name:tag for ollama and hailo.
func (s Source) ModelName() string {
	switch s.Kind {
	case KindFile:
		return trimGGUF(path.Base(s.Path))
	case KindHTTPS:
		if u, err := url.Parse(s.URL); err == nil {
			return trimGGUF(path.Base(u.Path))
		}
	case KindHF:
		return trimGGUF(path.Base(s.File))
	case KindOllama, KindHailo:
		return s.Name + ":" + s.Tag
	}
	return ""
}

// Ref is the name the engine knows the model by: name:tag for ollama and hailo-ollama; for a
// GGUF on llama-server, the alias it serves under, which is ModelName.
func (s Source) Ref() string { return s.ModelName() }

// String is the source's canonical form; Parse(s.String()) gives s back (but for Raw).
func (s Source) String() string {
	switch s.Kind {
	case KindFile:
		return (&url.URL{Scheme: "file", Path: s.Path}).String()
	case KindHTTPS:
		return s.URL
	case KindHF:
		return "hf://" + s.Owner + "/" + s.Repo + "/" + s.File
	case KindOllama:
		return "ollama://" + s.Name + ":" + s.Tag
	case KindHailo:
		return "hailo://" + s.Name + ":" + s.Tag
	}
	return s.Raw
}

// HFURL is where an hf:// source's file is downloaded from: <base>/<owner>/<repo>/resolve/main/<file>,
// against base (DefaultHFBase when empty). It is "" for other kinds.
func (s Source) HFURL(base string) string {
	if s.Kind != KindHF {
		return ""
	}
	if base == "" {
		base = DefaultHFBase
	}
	segs := strings.Split(s.File, "/")
	for i, seg := range segs {
		segs[i] = url.PathEscape(seg)
	}
	return strings.TrimRight(base, "/") + "/" + s.Owner + "/" + s.Repo + "/resolve/main/" + strings.Join(segs, "/")
}

// DownloadURL is the URL a GGUF source is fetched from: the https URL, or the hf file resolved
// against hfBase. It is "" for file, ollama and hailo sources.
func (s Source) DownloadURL(hfBase string) string {
	switch s.Kind {
	case KindHTTPS:
		return s.URL
	case KindHF:
		return s.HFURL(hfBase)
	}
	return ""
}

func invalid(format string, args ...any) error {
	return api.Errorf(api.CodeInvalidSource, format, args...)
}

// badChars says what is wrong with the characters of s, or "" when nothing is.
func badChars(s string) string {
	if !utf8.ValidString(s) {
		return "is not valid UTF-8"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return "contains the control character " + strconv.QuoteRune(r)
		}
	}
	return ""
}

// show quotes s for a message, shortened so a long source does not drown the message.
func show(s string) string {
	const max = 120
	if len(s) > max {
		cut := max
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		return strconv.Quote(s[:cut]) + "…"
	}
	return strconv.Quote(s)
}

func validScheme(s string) bool {
	if s == "" || !isASCIILetter(rune(s[0])) {
		return false
	}
	for _, r := range s {
		if !isASCIIAlnum(r) && r != '+' && r != '-' && r != '.' {
			return false
		}
	}
	return true
}

func unwrapURLError(err error) error {
	if ue, ok := err.(*url.Error); ok {
		return ue.Err
	}
	return err
}

func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

func trimGGUF(base string) string {
	if hasSuffixFold(base, ".gguf") {
		return base[:len(base)-len(".gguf")]
	}
	return base
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func isASCIILetter(r rune) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' }
func isASCIIAlnum(r rune) bool  { return isASCIILetter(r) || r >= '0' && r <= '9' }
