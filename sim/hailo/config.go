package hailo

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/llmkube/mesh/sim/internal/simserver"
	"github.com/llmkube/mesh/sim/simtext"
)

// PerModel, as TokensPerSecond, TTFT or LoadTime, means "Hailo's published figure for the model
// being run" (see the zoo table in zoo.go).
const PerModel = -1

// Config is everything the simulator can be told. Build one with DefaultConfig (or FastConfig
// for tests), adjust it, and hand it to Start, which validates it.
type Config struct {
	// Version is the hailo-ollama release to play: Version511 (the default), Version530 or
	// Version54 ("5.4" is accepted). versions.go says what differs.
	Version string
	// Listen is the engine's address (hailo-ollama's "server" setting). Tests use 127.0.0.1:0.
	Listen string
	// LibraryListen is the address of the second listener, which plays Hailo's model library.
	LibraryListen string
	// LibraryURL is where /api/pull fetches blobs from (hailo-ollama's "library" setting).
	// Empty means this simulator's own library listener.
	LibraryURL string
	// LibraryVersion names the release folder of the newer (5.4) library form,
	// /v<LibraryVersion>/blob/<file>.hef with a .sha256 companion.
	LibraryVersion string
	// DataDir is the hailo-ollama data folder: the one holding models/manifests and models/blob
	// ($XDG_DATA_HOME/hailo-ollama on a real host). Required.
	DataDir string
	// LibraryDir is where the library's blobs are kept; empty means DataDir/hailo-sim-library
	// (outside models/, so hailo-ollama's own layout stays as the real one).
	LibraryDir string
	// ConfigHome, when set, is the XDG_CONFIG_HOME under which Start writes
	// hailo-ollama/hailo-ollama.json naming the addresses actually bound, as a real install has.
	ConfigHome string
	// HEFSize is the exact size in bytes of every fake HEF. Keep it small in tests.
	HEFSize int64
	// RealSizes makes the simulator report each model's real HEF size (Hailo's, in zoo.go)
	// wherever the real ones report a HEF's size: the library's HEAD and range answers (which
	// a sizer reads before pulling) and /api/tags. The files stay HEFSize bytes, which a full
	// GET and a pull still move: a demo shows the real models' numbers without GB files.
	RealSizes bool
	// Preloaded names zoo models whose blob is already downloaded at start.
	Preloaded []string
	// FilenameManifests names zoo models whose manifest is written in the newer (5.4)
	// "hef_filename" form instead of 5.1.1's "hef_h10h" digest. A real 5.1.1 cannot read those;
	// the simulator serves and pulls them so a sizer's 5.4 path can be exercised.
	FilenameManifests []string
	// TokensPerSecond paces generation; PerModel uses Hailo's table, 0 is as fast as possible.
	TokensPerSecond float64
	// TTFT is the time to the first token; PerModel uses Hailo's table.
	TTFT time.Duration
	// LoadTime is how long a model takes to load onto the device; PerModel uses Hailo's table.
	LoadTime time.Duration
	// SwitchDelay is the pause hailo-ollama makes after releasing the device before loading
	// another model (2 s in 5.1.1, also on the first load).
	SwitchDelay time.Duration
	// ContextTokens is every zoo HEF's context; a longer prompt fails with a 500.
	ContextTokens int
	// FinalChunks sends the last chunk of every streamed chat, generate and pull (done:true, or
	// "success"). hailo-ollama 5.1.1 does not (false, the default): it closes the connection
	// after the last token, or once the blob is verified, and clients read "unexpected EOF".
	FinalChunks bool
	// StampTokens ends every token's text with the time it began to be written (real time,
	// whatever Clock is; simtext.Stamp): for measuring what a token's way to the client costs.
	StampTokens bool
	// LongestAnswer is the most tokens an answer runs before the simulated model ends it on its
	// own (simtext.AnswerLengthUpTo); 0 = simtext.MaxAnswer.
	LongestAnswer int
	// Clock is the time source; nil is the real clock. Tests may pass their own to control
	// pacing and keep_alive expiry without sleeping.
	Clock Clock
}

// Clock is the simulator's source of time.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends (returning its error).
	Sleep(ctx context.Context, d time.Duration) error
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

func (realClock) Sleep(ctx context.Context, d time.Duration) error { return simserver.Sleep(ctx, d) }

// DefaultConfig is hailo-ollama 5.1.1 as shipped: Hailo's timings, a 2 s switch delay, a 2048-token
// context, both listeners on loopback ports chosen by the system, a 1 MiB fake HEF. DataDir must
// still be set.
func DefaultConfig() Config {
	return Config{
		Version:         Version511,
		Listen:          "127.0.0.1:0",
		LibraryListen:   "127.0.0.1:0",
		LibraryVersion:  "5.4.0",
		HEFSize:         1 << 20,
		TokensPerSecond: PerModel,
		TTFT:            PerModel,
		LoadTime:        PerModel,
		SwitchDelay:     2 * time.Second,
		ContextTokens:   2048,
	}
}

// FastConfig is DefaultConfig for tests: data under dataDir, every delay zero and 4 KiB HEFs, so a
// whole conversation takes milliseconds.
func FastConfig(dataDir string) Config {
	c := DefaultConfig()
	c.DataDir = dataDir
	c.HEFSize = 4 << 10
	c.TokensPerSecond = 0
	c.TTFT = 0
	c.LoadTime = 0
	c.SwitchDelay = 0
	return c
}

// Environment variables read by ConfigFromEnv; the hailo-sim command has a flag for each.
const (
	EnvVersion           = "HAILO_SIM_VERSION"
	EnvListen            = "HAILO_SIM_LISTEN"
	EnvLibraryListen     = "HAILO_SIM_LIBRARY_LISTEN"
	EnvLibraryURL        = "HAILO_SIM_LIBRARY_URL"
	EnvLibraryVersion    = "HAILO_SIM_LIBRARY_VERSION"
	EnvDataDir           = "HAILO_SIM_DATA_DIR"
	EnvHEFSize           = "HAILO_SIM_HEF_SIZE"
	EnvRealSizes         = "HAILO_SIM_REAL_SIZES"
	EnvPreloaded         = "HAILO_SIM_PRELOADED"
	EnvFilenameManifests = "HAILO_SIM_FILENAME_MANIFESTS"
	EnvTokensPerSecond   = "HAILO_SIM_TOKENS_PER_SECOND"
	EnvTTFT              = "HAILO_SIM_TTFT"
	EnvLoadTime          = "HAILO_SIM_LOAD_TIME"
	EnvSwitchDelay       = "HAILO_SIM_SWITCH_DELAY"
	EnvContext           = "HAILO_SIM_CONTEXT"
	EnvFinalChunks       = "HAILO_SIM_FINAL_CHUNKS"
	EnvStampTokens       = "HAILO_SIM_STAMP_TOKENS"
	EnvLongestAnswer     = "HAILO_SIM_LONGEST_ANSWER"
)

// ConfigFromEnv returns base with every setting present in the environment applied, then
// validated. getenv is os.Getenv or a test's map; empty values count as absent.
func ConfigFromEnv(getenv func(string) string, base Config) (Config, error) {
	c := base
	var errs []error
	set := func(key string, apply func(v string) error) {
		if v := strings.TrimSpace(getenv(key)); v != "" {
			if err := apply(v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", key, v, err))
			}
		}
	}
	str := func(dst *string) func(string) error {
		return func(v string) error { *dst = v; return nil }
	}
	set(EnvVersion, str(&c.Version))
	set(EnvListen, str(&c.Listen))
	set(EnvLibraryListen, str(&c.LibraryListen))
	set(EnvLibraryURL, str(&c.LibraryURL))
	set(EnvLibraryVersion, str(&c.LibraryVersion))
	set(EnvDataDir, str(&c.DataDir))
	set(EnvHEFSize, func(v string) (err error) { c.HEFSize, err = ParseSize(v); return })
	set(EnvPreloaded, func(v string) error { c.Preloaded = splitList(v); return nil })
	set(EnvFilenameManifests, func(v string) error { c.FilenameManifests = splitList(v); return nil })
	set(EnvTokensPerSecond, func(v string) error {
		if v == "model" {
			c.TokensPerSecond = PerModel
			return nil
		}
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			return errors.New(`want a number of tokens per second, or "model"`)
		}
		c.TokensPerSecond = f
		return nil
	})
	modelDuration := func(dst *time.Duration) func(string) error {
		return func(v string) error {
			if v == "model" {
				*dst = PerModel
				return nil
			}
			d, err := time.ParseDuration(v)
			if err != nil {
				return errors.New(`want a duration such as 300ms, or "model"`)
			}
			*dst = d
			return nil
		}
	}
	set(EnvTTFT, modelDuration(&c.TTFT))
	set(EnvLoadTime, modelDuration(&c.LoadTime))
	set(EnvSwitchDelay, func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil {
			return errors.New("want a duration such as 2s")
		}
		c.SwitchDelay = d
		return nil
	})
	set(EnvContext, func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil {
			return errors.New("want a whole number of tokens")
		}
		c.ContextTokens = n
		return nil
	})
	boolean := func(dst *bool) func(string) error {
		return func(v string) (err error) {
			if *dst, err = strconv.ParseBool(v); err != nil {
				return errors.New("want true or false")
			}
			return nil
		}
	}
	set(EnvFinalChunks, boolean(&c.FinalChunks))
	set(EnvStampTokens, boolean(&c.StampTokens))
	set(EnvRealSizes, boolean(&c.RealSizes))
	if v := getenv(EnvLongestAnswer); strings.TrimSpace(v) != "" {
		n, err := simtext.ParseLongestAnswer(EnvLongestAnswer, v)
		if err != nil {
			errs = append(errs, err)
		}
		c.LongestAnswer = n
	}
	if len(errs) > 0 {
		return base, errors.Join(errs...)
	}
	if err := c.Validate(); err != nil {
		return base, err
	}
	c.Version, _ = NormalizeVersion(c.Version) // Validate accepted it
	return c, nil
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// MaxHEFSize bounds HEFSize: the largest real HEF is about 3 GB; fake ones are written in full.
const MaxHEFSize = 8 << 30

var sizeUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"B", 1},
}

// ParseSize reads a byte count: "4096", "64KiB", "1MiB", "2GB" (K, M and G alone are binary).
func ParseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range sizeUnits {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("want a byte count such as 4096, 64KiB or 1MiB")
	}
	if n > MaxHEFSize/mult {
		return 0, fmt.Errorf("larger than the %d-byte limit", int64(MaxHEFSize))
	}
	return n * mult, nil
}

var versionRE = regexp.MustCompile(`^[0-9]+\.[0-9]+\.[0-9]+$`)

// Validate reports every bad setting at once, each naming what would be accepted.
func (c Config) Validate() error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	version, err := NormalizeVersion(c.Version)
	if err != nil {
		bad("version %q: %v", c.Version, err)
		version = Version511 // to check the models below against something
	}
	if err := checkAddr(c.Listen); err != nil {
		bad("listen address %q: %v", c.Listen, err)
	}
	if err := checkAddr(c.LibraryListen); err != nil {
		bad("library listen address %q: %v", c.LibraryListen, err)
	}
	if c.LibraryURL != "" {
		u, err := url.Parse(c.LibraryURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			bad("library URL %q: want http://host:port or https://host", c.LibraryURL)
		}
	}
	if !versionRE.MatchString(c.LibraryVersion) {
		bad("library version %q: want major.minor.revision, such as 5.4.0", c.LibraryVersion)
	}
	if c.DataDir == "" {
		bad("data dir: required (the hailo-ollama folder holding models/)")
	}
	if err := simtext.CheckLongestAnswer(c.LongestAnswer); err != nil {
		bad("%v", err)
	}
	if c.HEFSize < 1 || c.HEFSize > MaxHEFSize {
		bad("HEF size %d: want 1 byte to %d bytes", c.HEFSize, int64(MaxHEFSize))
	}
	for _, m := range c.Preloaded {
		if !slices.Contains(releases[version].models, m) {
			bad("preloaded model %q: not in the %s zoo (%s)", m, version, strings.Join(releases[version].models, ", "))
		}
	}
	for _, m := range c.FilenameManifests {
		if !slices.Contains(releases[version].models, m) {
			bad("filename-manifest model %q: not in the %s zoo (%s)", m, version, strings.Join(releases[version].models, ", "))
		}
	}
	if c.TokensPerSecond != PerModel && (c.TokensPerSecond < 0 || math.IsNaN(c.TokensPerSecond) || math.IsInf(c.TokensPerSecond, 0)) {
		bad("tokens per second %v: want 0 (as fast as possible) or more, or per model", c.TokensPerSecond)
	}
	if c.TTFT != PerModel && c.TTFT < 0 {
		bad("time to first token %v: want 0 or more, or per model", c.TTFT)
	}
	if c.LoadTime != PerModel && c.LoadTime < 0 {
		bad("load time %v: want 0 or more, or per model", c.LoadTime)
	}
	if c.SwitchDelay < 0 {
		bad("switch delay %v: want 0 or more", c.SwitchDelay)
	}
	if c.ContextTokens < 1 {
		bad("context %d tokens: want 1 or more", c.ContextTokens)
	}
	return errors.Join(errs...)
}

// checkAddr accepts ip:port or localhost:port with a port from 0 to 65535. Host names other
// than localhost are refused: the simulator binds addresses, it does not resolve names.
func checkAddr(addr string) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return errors.New("want ip:port, such as 127.0.0.1:8000")
	}
	if host != "localhost" && net.ParseIP(host) == nil {
		return errors.New("want an IP address (127.0.0.1, or 0.0.0.0 for every interface) or localhost before the port")
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return errors.New("want a port from 0 to 65535 (0 picks a free one)")
	}
	return nil
}
