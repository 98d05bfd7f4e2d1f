package main

import (
	"io"
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// Backticks in a flag's help name its value's placeholder (pflag.UnquoteUsage): quoting a
// command there printed "--state-dir run" and "--join-string llmkube-agent init". Only real
// placeholders may be back-quoted.
func TestFlagHelpHasNoBogusPlaceholders(t *testing.T) {
	placeholders := map[string]bool{"host:port": true}
	e := env{getenv: os.Getenv, stdout: io.Discard, stderr: io.Discard}
	cmds := commands(e) // every one, so a command added later is checked too
	for len(cmds) > 0 {
		c := cmds[0]
		cmds = append(cmds[1:], c.Commands()...)
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if strings.Contains(f.Usage, "`") {
				if name, _ := pflag.UnquoteUsage(f); !placeholders[name] {
					t.Errorf("%s --%s: help back-quotes %q, which pflag prints as the value's name", c.Name(), f.Name, name)
				}
			}
		})
	}
}
