package main

import (
	"cmp"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"

	"github.com/llmkube/mesh/agent"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/download"
	"github.com/llmkube/mesh/engines/ollama"
	"github.com/llmkube/mesh/engines/sizing"
)

// ollamaMirror is the agent's part in moving Ollama models between hosts, or nil: the daemon's
// blobs and manifests served to peers, and the registry mirror the Ollama driver pulls a model
// a peer holds through. Only for a daemon on this host (it reaches the mirror on loopback) in a
// mesh (a host alone has no peers), unless --ollama-mirror=false.
func ollamaMirror(o *runOptions, drivers []engines.Driver, ln net.Listener, guard download.Options) *agent.OllamaMirror {
	if !o.ollamaMirror || o.noMesh || !loopbackURL(o.ollamaURL) {
		return nil
	}
	var od *ollama.Driver
	for _, d := range drivers {
		if x, ok := d.(*ollama.Driver); ok {
			od = x
		}
	}
	if od == nil {
		return nil
	}
	addr := ln.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	m := &agent.OllamaMirror{
		Models:   cmp.Or(o.ollamaModels, ollamaModelsDir()),
		Registry: cmp.Or(o.ollamaRegistry, sizing.DefaultOllamaRegistry),
		Download: guard,
	}
	m.Attach(od, net.JoinHostPort(host, strconv.Itoa(addr.Port)), o.modelsDir, guard.Log)
	return m
}

// loopbackURL reports whether a daemon's URL names this host's loopback.
func loopbackURL(s string) bool {
	u, err := url.Parse(s)
	if err != nil {
		return false
	}
	if u.Hostname() == "localhost" {
		return true
	}
	ip := net.ParseIP(u.Hostname())
	return ip != nil && ip.IsLoopback()
}

// ollamaModelsDir is where this host's Ollama keeps its models, as far as the agent can read:
// OLLAMA_MODELS, the Linux service's folder, then the user's; "" when none has a blobs folder.
func ollamaModelsDir() string {
	candidates := []string{os.Getenv("OLLAMA_MODELS"), "/usr/share/ollama/.ollama/models"}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates, filepath.Join(home, ".ollama", "models"))
	}
	for _, c := range candidates {
		if c == "" {
			continue
		}
		if _, err := os.ReadDir(filepath.Join(c, "blobs")); err == nil {
			return c
		}
	}
	return ""
}
