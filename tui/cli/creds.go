package cli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"

	"github.com/llmkube/mesh/agent/api"
)

// Environment variables the CLI reads (flags win over them).
const (
	EnvJoin    = "LLMKUBE_JOIN"         // the join string
	EnvToken   = "LLMKUBE_TOKEN"        // an API token (admin or namespace)
	EnvAgent   = "LLMKUBE_AGENT"        // an agent's API URL: act through it without joining
	EnvProfile = "LLMKUBE_MESH_PROFILE" // gossip timings: lan (default), wan, local
)

// maxSecretFile bounds a join or token file: both are one short line.
const maxSecretFile = 64 << 10

// creds are the secrets a command runs with. They are never printed; the redactor knows them.
type creds struct {
	join  string // "" when none
	token string // "" when none (then derived from the join string by the console)
	agent string
}

// resolveCreds reads the join string and token from flag, file or environment, in that order.
// Giving both a flag and its file is a usage error, so a script never runs with the one it
// did not mean.
func (a *app) resolveCreds() (creds, error) {
	var c creds
	var err error
	if c.join, err = a.secret("--join-string", a.g.joinString, "--join-file", a.g.joinFile, EnvJoin); err != nil {
		return c, err
	}
	if a.g.joinFile != "" {
		c.join = api.JoinFileText([]byte(c.join)) // an agent's mesh.json works as it does for the agent
	}
	if c.token, err = a.secret("--token", a.g.token, "--token-file", a.g.tokenFile, EnvToken); err != nil {
		return c, err
	}
	a.red.add(c.join, c.token)
	if c.join != "" {
		j, err := api.ParseJoin(c.join)
		if err != nil {
			return c, &usageError{err}
		}
		a.red.add(joinSecretText(c.join), api.AdminToken(j.Secret))
	}
	if c.token != "" && strings.ContainsAny(c.token, " \t\r\n") {
		return c, usagef("the token holds white space: give it alone (as `llmkube-tui mesh token` prints it)")
	}
	c.agent = a.g.agent
	if c.agent == "" {
		c.agent = a.getenv(EnvAgent)
	}
	return c, nil
}

// secret reads one secret from its flag, its file flag, or the environment.
func (a *app) secret(flag, val, fileFlag, file, env string) (string, error) {
	switch {
	case val != "" && file != "":
		return "", usagef("give %s or %s, not both", flag, fileFlag)
	case val != "":
		return strings.TrimSpace(val), nil
	case file != "":
		s, err := a.readSecretFile(fileFlag, file)
		if err != nil {
			return "", err
		}
		if s == "" {
			return "", usagef("%s %s is empty", fileFlag, file)
		}
		return s, nil
	}
	return strings.TrimSpace(a.getenv(env)), nil
}

func (a *app) readSecretFile(flag, path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", &usageError{fmt.Errorf("%s: %w", flag, err)}
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && runtime.GOOS != "windows" && st.Mode().Perm()&0o077 != 0 {
		fmt.Fprintf(a.stderr, "warning: %s is readable by other users: chmod 600 %s\n", path, path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxSecretFile+1))
	if err != nil {
		return "", &usageError{fmt.Errorf("%s: %w", flag, err)}
	}
	if len(b) > maxSecretFile {
		return "", usagef("%s %s: larger than %d bytes, not a join string or token", flag, path, maxSecretFile)
	}
	return strings.TrimSpace(string(b)), nil
}

// joinSecretText is the base64 secret inside a join string, so it is redacted on its own too.
func joinSecretText(join string) string {
	rest, _ := strings.CutPrefix(strings.TrimSpace(join), "llmk1:")
	rest, _, _ = strings.Cut(rest, "@")
	_, secret, _ := strings.Cut(rest, ":")
	return secret
}

// redactor replaces known secrets in what the CLI writes to stderr and logs: a safety net under
// the rule that no message carries a secret, for errors that quote what they were given.
type redactor struct {
	mu      sync.Mutex
	secrets [][]byte
}

// minSecret: shorter strings are too likely to occur by chance to be worth hiding.
const minSecret = 8

func (r *redactor) add(secrets ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range secrets {
		if len(s) >= minSecret {
			r.secrets = append(r.secrets, []byte(s))
		}
	}
}

func (r *redactor) redact(b []byte) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.secrets {
		if bytes.Contains(b, s) {
			b = bytes.ReplaceAll(b, s, []byte("[redacted]"))
		}
	}
	return b
}

func (r *redactor) string(s string) string { return string(r.redact([]byte(s))) }

// safeWriter is how the CLI writes to stderr and log files: it serialises the command's own
// lines and the mesh's log lines (written from memberlist's goroutines), redacts secrets from
// each write (the CLI writes whole lines), and drops whatever comes after close — memberlist
// may log for a moment after the console left, and nothing may reach the caller's writer once
// Run has returned.
type safeWriter struct {
	mu     sync.Mutex
	r      *redactor
	w      io.Writer
	closed bool
}

func newSafeWriter(r *redactor, w io.Writer) *safeWriter { return &safeWriter{r: r, w: w} }

func (s *safeWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return len(p), nil
	}
	if _, err := s.w.Write(s.r.redact(p)); err != nil {
		return 0, err
	}
	return len(p), nil
}

func (s *safeWriter) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// errNoCreds is what a command needing the mesh says when it has nothing to reach it with.
var errNoCreds = errors.New("nothing to connect to: give a join string (--join-string, " + EnvJoin + " or --join-file) or --agent URL (or " + EnvAgent + ") with a token")
