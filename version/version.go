// Package version is the one home of the build's version, commit and date. `make release` (and
// `make build`) stamp them with -ldflags "-X github.com/llmkube/mesh/version.Version=…"; a plain
// `go build` falls back to what the Go toolchain recorded in the binary (the VCS revision and
// time of a build inside a git checkout), so even an unstamped binary says which commit it is.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at build time by the Makefile's ldflags. Empty means not stamped.
var (
	Version = "" // e.g. 0.3.0 or 0.3.0-12-gabc1234
	Commit  = "" // full or short commit hash
	Date    = "" // build date, RFC 3339 (UTC)
)

// Info is what a program knows of its own build.
type Info struct {
	Version string `json:"version"`
	Commit  string `json:"commit,omitempty"`
	Date    string `json:"date,omitempty"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
}

// Get returns the stamped values, filling what is missing from the binary's build info.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, Date: Date, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		modified := false
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
				}
			case "vcs.time":
				if i.Date == "" {
					i.Date = s.Value
				}
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		if i.Version == "" && modified && i.Commit != "" {
			i.Version = "0.0.0-dev+dirty"
		}
	}
	if i.Version == "" {
		i.Version = "0.0.0-dev"
	}
	return i
}

// String is the one-line form both programs print for --version and `version`.
func (i Info) String() string {
	s := i.Version
	if i.Commit != "" {
		c := i.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		s += " (" + c
		if i.Date != "" {
			s += ", " + i.Date
		}
		s += ")"
	}
	return fmt.Sprintf("%s %s %s/%s", s, i.Go, i.OS, i.Arch)
}
