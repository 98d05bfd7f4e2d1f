package cmdline

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/tui/internal/tuitest"
	"github.com/llmkube/mesh/tui/styles"
)

func typeKeys(l *Line, ks ...string) {
	for _, k := range ks {
		switch k {
		case "tab":
			l.Key(tea.KeyMsg{Type: tea.KeyTab})
		case "up":
			l.Key(tea.KeyMsg{Type: tea.KeyUp})
		case "down":
			l.Key(tea.KeyMsg{Type: tea.KeyDown})
		case "ctrl+n":
			l.Key(tea.KeyMsg{Type: tea.KeyCtrlN})
		default:
			for _, r := range k {
				l.Key(tea.KeyMsg{Type: tea.KeyRunes, Runes: []rune{r}})
			}
		}
	}
}

func newLine() *Line {
	words := []string{"hosts ", "help", "models", "place "}
	hosts := []string{"pi5-hailo", "pi4", "gpu-server"}
	return New(styles.New(tuitest.Renderer()), "", func(typed string) []string {
		verb, _, arg := strings.Cut(typed, " ")
		if !arg {
			return words
		}
		var out []string
		for _, h := range hosts {
			out = append(out, verb+" "+h)
		}
		return out
	})
}

func TestTabCompletes(t *testing.T) {
	for _, tc := range []struct {
		keys []string
		want string
	}{
		{[]string{"mo", "tab"}, "models"},
		{[]string{"ho", "tab", "g", "tab"}, "hosts gpu-server"},
		{[]string{"h ", "p", "tab"}, "h pi"},                             // the common prefix of pi5-hailo, pi4
		{[]string{"h ", "p", "tab", "tab"}, "h pi5-hailo"},               // then the one shown
		{[]string{"h ", "p", "tab", "tab", "tab"}, "h pi4"},              // then the next
		{[]string{"h ", "p", "tab", "tab", "tab", "tab"}, "h pi5-hailo"}, // round again
		{[]string{"h", "tab"}, "hosts "},                                 // hosts and help share only "h"
		{[]string{"h", "ctrl+n", "tab"}, "help"},                         // ctrl+n chooses the other
		{[]string{"zz", "tab"}, "zz"},                                    // nothing to complete
		{[]string{"tab"}, ""},
	} {
		l := newLine()
		l.Focus()
		typeKeys(l, tc.keys...)
		assert.Equal(t, tc.want, l.Value(), "%q", tc.keys)
	}
}

func TestCompletionShowsAfterTheCursor(t *testing.T) {
	l := newLine()
	l.noColor = false // as in a terminal with colour
	l.SetWidth(40)
	l.Focus()
	typeKeys(l, "mod")
	assert.Contains(t, l.View(), "mod"+"els", "the rest of the completion is drawn after what is typed")
	assert.Equal(t, []string{"models"}, l.Matches())

	plain := newLine() // the tests' renderer has no colour, as under NO_COLOR
	plain.SetWidth(40)
	plain.Focus()
	typeKeys(plain, "mod")
	assert.NotContains(t, plain.View(), "models", "without colour a completion would look typed")
	typeKeys(plain, "tab")
	assert.Equal(t, "models", plain.Value(), "tab takes it all the same")
}

func TestHistoryRecall(t *testing.T) {
	l := newLine()
	assert.True(t, l.Remember("hosts"))
	assert.True(t, l.Remember("chat llama3.2:1b"))
	assert.False(t, l.Remember("chat llama3.2:1b"), "not twice in a row")
	assert.False(t, l.Remember("  "))
	l.Focus()
	typeKeys(l, "mo")
	typeKeys(l, "up")
	assert.Equal(t, "chat llama3.2:1b", l.Value())
	typeKeys(l, "up", "up")
	assert.Equal(t, "hosts", l.Value(), "stops at the oldest")
	typeKeys(l, "down")
	assert.Equal(t, "chat llama3.2:1b", l.Value())
	typeKeys(l, "down")
	assert.Equal(t, "mo", l.Value(), "past the newest is what was being typed")

	for i := 0; i < MaxHistory+10; i++ {
		l.Remember(strings.Repeat("x", i+1))
	}
	assert.Len(t, l.History(), MaxHistory)
}

func TestHistoryFile(t *testing.T) {
	f := &File{Path: filepath.Join(t.TempDir(), "state", "llmkube", "console-history")}
	lines, err := f.Load()
	require.NoError(t, err)
	assert.Empty(t, lines, "no file yet is an empty history")

	require.NoError(t, f.Save(2, []string{"hosts", "chat qwen2:1.5b"}))
	require.NoError(t, f.Save(1, []string{"an older save that lost the race"}))
	lines, err = (&File{Path: f.Path}).Load()
	require.NoError(t, err)
	assert.Equal(t, []string{"hosts", "chat qwen2:1.5b"}, lines, "read back by another run; the older save skipped")

	st, err := os.Stat(f.Path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the history is the user's own")
	left, err := os.ReadDir(filepath.Dir(f.Path))
	require.NoError(t, err)
	assert.Len(t, left, 1, "no temporary file left behind")

	require.NoError(t, os.WriteFile(f.Path, []byte("hosts\n\x1b]52;c;evil\x07\n\nmodels\n"), 0o600))
	lines, err = f.Load()
	require.NoError(t, err)
	assert.Equal(t, []string{"hosts", "models"}, lines, "a line with control characters is dropped, never shown")
}

func TestDefaultPathHonoursXDGState(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", "/somewhere/state")
	p, err := DefaultPath()
	require.NoError(t, err)
	assert.Equal(t, "/somewhere/state/llmkube/console-history", p)
}
