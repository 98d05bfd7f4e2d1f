package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/tui/cli"
)

// scriptingDoc is the markdown whose "## Scripting" section's ```sh examples are run against a
// local mesh, so they cannot go stale.
var scriptingDoc = "../../README.md"

const scriptingHeading = "## Scripting"

// example is one ```sh block of the section.
type example struct {
	line int // of the opening fence, 1-based, for messages
	body []string
}

// scriptingExamples returns the ```sh blocks of the section under heading, up to the next
// heading of the same or a higher level.
func scriptingExamples(md, heading string) ([]example, error) {
	var (
		out              []example
		in, found, fence bool
		cur              example
	)
	level := strings.Count(strings.Fields(heading)[0], "#")
	sc := bufio.NewScanner(strings.NewReader(md))
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if fence {
			if strings.TrimSpace(line) == "```" {
				fence = false
				if cur.line > 0 {
					out = append(out, cur)
				}
				cur = example{}
			} else if cur.line > 0 {
				cur.body = append(cur.body, line)
			}
			continue
		}
		if strings.HasPrefix(line, "#") {
			l := len(line) - len(strings.TrimLeft(line, "#"))
			if strings.TrimSpace(line) == heading {
				in, found = true, true
				continue
			}
			if in && l <= level {
				in = false
			}
		}
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") {
			fence = true
			if in && strings.TrimPrefix(t, "```") == "sh" {
				cur = example{line: n}
			}
		}
	}
	if !found {
		return nil, fmt.Errorf("no %q heading", heading)
	}
	if fence {
		return nil, fmt.Errorf("a code fence is not closed")
	}
	return out, nil
}

// wantExit matches a trailing "# exit N" comment: the line must exit with N.
var wantExit = regexp.MustCompile(`^(.*\S)\s+#\s*exit\s+(\d+)\b.*$`)

// shellScript turns an example into a script for `sh -eu`: every line must succeed except
// those annotated "# exit N", which must exit with exactly N.
func shellScript(ex example) string {
	var b strings.Builder
	for i, line := range ex.body {
		m := wantExit.FindStringSubmatch(line)
		if m == nil {
			b.WriteString(line + "\n")
			continue
		}
		fmt.Fprintf(&b, "if %s; then __rc=0; else __rc=$?; fi; [ \"$__rc\" -eq %s ] || { echo \"example line %d: want exit %s, got $__rc\" >&2; exit 97; }\n",
			m[1], m[2], ex.line+1+i, m[2])
	}
	return b.String()
}

func TestScriptingExamplesParse(t *testing.T) {
	md := "# Title\n```sh\nnot this\n```\n## Scripting\ntext\n```sh\nllmkube-tui mesh hosts\nllmkube-tui mesh delete x   # exit 4: not found\n```\n" +
		"```text\noutput\n```\n### Sub\n```sh\necho sub\n```\n## Next\n```sh\nnot this either\n```\n"
	exs, err := scriptingExamples(md, scriptingHeading)
	require.NoError(t, err)
	require.Len(t, exs, 2)
	assert.Equal(t, 7, exs[0].line)
	assert.Equal(t, []string{"llmkube-tui mesh hosts", "llmkube-tui mesh delete x   # exit 4: not found"}, exs[0].body)
	assert.Equal(t, []string{"echo sub"}, exs[1].body)
	s := shellScript(exs[0])
	assert.Contains(t, s, "llmkube-tui mesh hosts\n")
	assert.Contains(t, s, `if llmkube-tui mesh delete x; then __rc=0; else __rc=$?; fi; [ "$__rc" -eq 4 ]`)
	assert.Contains(t, s, "example line 9")

	_, err = scriptingExamples("# nothing here\n", scriptingHeading)
	assert.Error(t, err)
	_, err = scriptingExamples("## Scripting\n```sh\nopen\n", scriptingHeading)
	assert.Error(t, err)
}

// exampleURLs are the addresses the examples use for a real mesh, and which host of the local
// mesh stands for each.
var exampleURLs = map[string]string{"https://gpu-server.local:7777": "gpu-server"}

// TestScriptingExamples runs every ```sh example of the section with sh -eu, as a reader would
// paste it: llmkube-tui on the PATH (this test binary, acting as the program), LLMKUBE_JOIN set
// to the local mesh's join string, a fresh HOME and working folder. Every line must succeed
// but those marked "# exit N", which must exit with N; every .json or .ndjson file the examples
// write must hold the documented schema.
func TestScriptingExamples(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh to run the examples with")
	}
	m := localMesh(t)
	md, err := os.ReadFile(scriptingDoc)
	require.NoError(t, err)
	exs, err := scriptingExamples(string(md), scriptingHeading)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(exs), 3, "the section shows examples")

	self, err := os.Executable()
	require.NoError(t, err)
	bin, home, work := t.TempDir(), t.TempDir(), t.TempDir()
	require.NoError(t, os.Symlink(self, filepath.Join(bin, "llmkube-tui")))
	var pairs []string
	for url, host := range exampleURLs {
		pairs = append(pairs, url, m.Host(host).URL)
	}
	subst := strings.NewReplacer(pairs...)
	env := []string{
		"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + home,
		"TMPDIR=" + os.TempDir(),
		// Under -race every process sleeps a second at exit to flush reports; the examples
		// start dozens.
		"GORACE=atexit_sleep_ms=0",
		childEnv + "=1",
		"LLMKUBE_JOIN=" + m.JoinString(),
		"LLMKUBE_MESH_PROFILE=local",
	}
	for _, ex := range exs {
		t.Run(fmt.Sprintf("%s:%d", scriptingDoc, ex.line), func(t *testing.T) {
			script := subst.Replace(shellScript(ex))
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, sh, "-eu", "-c", script)
			cmd.Dir, cmd.Env = work, env
			// A child left running (an example's `mesh watch &` after a failed line) keeps the
			// output pipe open: without a wait delay the test would hang past its deadline
			// instead of failing with the output.
			cmd.WaitDelay = 5 * time.Second
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "the example at %s:%d failed\n--- script\n%s--- output\n%s", scriptingDoc, ex.line, script, out)
		})
	}
	files, err := os.ReadDir(work)
	require.NoError(t, err)
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(work, f.Name()))
		require.NoError(t, err)
		switch filepath.Ext(f.Name()) {
		case ".json":
			var doc struct{ Schema string }
			require.NoError(t, json.Unmarshal(b, &doc), f.Name())
			assert.Equal(t, cli.Schema, doc.Schema, f.Name())
		case ".ndjson":
			ndjson(t, string(b))
		}
	}
}
