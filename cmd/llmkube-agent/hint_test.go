package main

import (
	"strings"
	"testing"

	"github.com/llmkube/mesh/engines/download"
)

// A download refused for a private address names the flag that allows it, and that flag is
// this program's (issue 42: the refusal pointed at an allowlist no flag sets).
func TestPrivateDownloadHintNamesTheFlag(t *testing.T) {
	f := runCommand(env{}).Flags().Lookup("allow-private-downloads")
	if f == nil {
		t.Fatal("llmkube-agent run has no --allow-private-downloads")
	}
	if !strings.Contains(download.PrivateHint, "--"+f.Name) {
		t.Fatalf("the refusal's hint %q does not name --%s", download.PrivateHint, f.Name)
	}
}
