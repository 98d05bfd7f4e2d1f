package tui

import (
	"fmt"
	"strings"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/tui/common"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/views/chat"
	"github.com/llmkube/mesh/tui/views/place"
)

// command is one verb of the `:` command line. The table is the one home of the verbs: the
// line runs them, the help lists them with their abbreviations, tab completes them.
type command struct {
	name    string
	aliases []string
	arg     string // what the argument is ("NAME", "SOURCE", "MODEL"), "" for none
	desc    string
	run     func(a *App, arg string) tea.Cmd
}

// commands is the table (a function: the verbs call back into the App, which lists them).
func commands() []command {
	return []command{
		{name: "hosts", aliases: []string{"h", "host"}, arg: "NAME", desc: "the hosts, or one host's details",
			run: func(a *App, arg string) tea.Cmd {
				if arg != "" {
					return a.navigate(common.PageHostDetail, arg)
				}
				return a.navigate(common.PageHosts, "")
			}},
		{name: "models", aliases: []string{"m", "model", "placements"}, desc: "every placement",
			run: func(a *App, _ string) tea.Cmd { return a.navigate(common.PageModels, "") }},
		{name: "place", aliases: []string{"p"}, arg: "SOURCE", desc: "place a model (form filled in)",
			run: func(a *App, arg string) tea.Cmd { return a.navigate(common.PagePlace, arg) }},
		{name: "chat", aliases: []string{"c"}, arg: "MODEL", desc: "chat with a ready model",
			run: func(a *App, arg string) tea.Cmd { return a.navigate(common.PageChat, arg) }},
		{name: "events", aliases: []string{"e"}, desc: "what happened in the mesh",
			run: func(a *App, _ string) tea.Cmd { return a.navigate(common.PageEvents, "") }},
		{name: "doctor", aliases: []string{"d"}, desc: "why peers or models are missing",
			run: func(a *App, _ string) tea.Cmd { return a.navigate(common.PageDoctor, "") }},
		{name: "help", aliases: []string{"?"}, desc: "this help",
			run: func(a *App, _ string) tea.Cmd { return a.navigate(common.PageHelp, "") }},
		{name: "quit", aliases: []string{"q", "exit"}, desc: "leave the console",
			run: func(a *App, _ string) tea.Cmd { return a.quit() }},
	}
}

// lookup finds a verb by name or abbreviation.
func lookup(verb string) (command, bool) {
	verb = strings.ToLower(verb)
	for _, c := range commands() {
		if c.name == verb {
			return c, true
		}
		for _, al := range c.aliases {
			if al == verb {
				return c, true
			}
		}
	}
	return command{}, false
}

// command runs a `:` command line, k9s-style.
func (a *App) command(line string) tea.Cmd {
	verb, arg, _ := strings.Cut(strings.TrimSpace(line), " ")
	if verb == "" {
		return nil
	}
	c, ok := lookup(verb)
	if !ok {
		return common.Status(fmt.Sprintf("unknown command %q — try :help", verb), true)
	}
	return c.run(a, strings.TrimSpace(arg))
}

// commandHelp is the command line's section of the help: each verb with its argument, its
// abbreviations and what it does. (The bindings carry help text only: they are not keys.)
func commandHelp() common.HelpSection {
	sec := common.HelpSection{Title: "Command line (:)"}
	for _, c := range commands() {
		syntax := ":" + c.name
		if c.arg != "" {
			syntax += " [" + c.arg + "]"
		}
		// The abbreviations first: on a narrow column the description is what gets cut.
		desc := c.desc
		if len(c.aliases) > 0 {
			desc = ":" + strings.Join(c.aliases, " :") + " · " + desc
		}
		sec.Keys = append(sec.Keys, key.NewBinding(key.WithHelp(syntax, desc)))
	}
	return sec
}

// completions are the whole lines that may follow what is typed: a verb, then the verb as
// typed with one of its arguments (a host, a ready model, a source the mesh offers).
func (a *App) completions(typed string) []string {
	verb, _, hasArg := strings.Cut(typed, " ")
	if !hasArg {
		var out []string
		for _, c := range commands() {
			name := c.name
			if c.arg != "" {
				name += " " // the argument comes next
			}
			out = append(out, name)
		}
		return out
	}
	c, ok := lookup(verb)
	if !ok {
		return nil
	}
	var args []string
	switch c.name {
	case "hosts":
		for _, m := range console.Agents(a.ctx.Mesh) {
			args = append(args, m.Name)
		}
	case "chat":
		for _, ch := range chat.Choices(a.ctx.Mesh) {
			args = append(args, ch.Model)
		}
	case "place":
		for _, s := range place.Suggest(a.ctx.Mesh, a.ctx.Recent) {
			args = append(args, s.Source)
		}
	}
	out := make([]string, 0, len(args))
	for _, arg := range args {
		out = append(out, verb+" "+arg)
	}
	return out
}

// historyMsg is the command history read at start, or why it could not be read or written.
type historyMsg struct {
	loaded []string
	err    error
}

func (a *App) loadHistory() tea.Cmd {
	f := a.history
	if f == nil {
		return nil
	}
	return func() tea.Msg {
		lines, err := f.Load()
		return historyMsg{loaded: lines, err: err}
	}
}

// saveHistory writes the history as it is now, in a command; saves overtaken by a later one
// are skipped by the file.
func (a *App) saveHistory() tea.Cmd {
	f := a.history
	if f == nil {
		return nil
	}
	a.histSeq++
	seq, lines := a.histSeq, a.cmdline.History()
	return func() tea.Msg {
		if err := f.Save(seq, lines); err != nil {
			return historyMsg{err: err}
		}
		return nil
	}
}
