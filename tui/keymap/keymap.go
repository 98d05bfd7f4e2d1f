// Package keymap is every key binding of the console in one place; the help view is generated
// from it, so help cannot disagree with the keys.
package keymap

import "github.com/charmbracelet/bubbles/key"

// KeyMap holds the console's bindings.
type KeyMap struct {
	Quit    key.Binding
	Help    key.Binding
	Command key.Binding
	Filter  key.Binding
	NextTab key.Binding
	PrevTab key.Binding
	Hosts   key.Binding
	Models  key.Binding
	Place   key.Binding
	Chat    key.Binding
	Events  key.Binding
	Doctor  key.Binding
	Mouse   key.Binding // gives the mouse to the terminal (to select text) and back

	Up       key.Binding
	Down     key.Binding
	PageUp   key.Binding
	PageDown key.Binding
	Top      key.Binding
	Bottom   key.Binding
	Open     key.Binding
	Back     key.Binding
	Sort     key.Binding

	Delete  key.Binding // dangerous: always confirmed
	Confirm key.Binding
	Cancel  key.Binding

	Send    key.Binding // chat: send the message
	Newline key.Binding // chat: a new line in the message
	Stop    key.Binding // chat: cancel the generation
	Spread  key.Binding // place: toggle best-fit / spread
	NextFld key.Binding // forms: next field
	PrevFld key.Binding
}

// Default is the console's key map.
func Default() KeyMap {
	b := func(keys []string, k, desc string) key.Binding {
		return key.NewBinding(key.WithKeys(keys...), key.WithHelp(k, desc))
	}
	return KeyMap{
		Quit:    b([]string{"q", "ctrl+c"}, "q", "quit"),
		Help:    b([]string{"?"}, "?", "help"),
		Command: b([]string{":"}, ":", "command"),
		Filter:  b([]string{"/"}, "/", "filter"),
		NextTab: b([]string{"tab"}, "tab", "next view"),
		PrevTab: b([]string{"shift+tab"}, "shift+tab", "previous view"),
		Hosts:   b([]string{"1"}, "1", "hosts"),
		Models:  b([]string{"2"}, "2", "models"),
		Place:   b([]string{"3", "p"}, "3/p", "place a model"),
		Chat:    b([]string{"4", "c"}, "4/c", "chat"),
		Events:  b([]string{"5", "e"}, "5/e", "events"),
		Doctor:  b([]string{"6"}, "6", "doctor"),
		Mouse:   b([]string{"ctrl+y"}, "ctrl+y", "mouse off to select text / on again"),

		Up:       b([]string{"up", "k"}, "↑/k", "up"),
		Down:     b([]string{"down", "j"}, "↓/j", "down"),
		PageUp:   b([]string{"pgup", "ctrl+u"}, "pgup", "page up"),
		PageDown: b([]string{"pgdown", "ctrl+d"}, "pgdn", "page down"),
		Top:      b([]string{"home", "g"}, "g", "top"),
		Bottom:   b([]string{"end", "G"}, "G", "bottom"),
		Open:     b([]string{"enter"}, "enter", "open"),
		Back:     b([]string{"esc"}, "esc", "back"),
		Sort:     b([]string{"s"}, "s", "sort"),

		Delete:  b([]string{"x", "delete"}, "x", "delete (asks first)"),
		Confirm: b([]string{"y"}, "y", "yes"),
		Cancel:  b([]string{"n", "esc"}, "n", "no"),

		Send:    b([]string{"enter"}, "enter", "send"),
		Newline: b([]string{"alt+enter", "ctrl+j"}, "alt+enter", "new line"),
		Stop:    b([]string{"esc"}, "esc", "stop generating"),
		Spread:  b([]string{"ctrl+s"}, "ctrl+s", "best-fit / spread"),
		NextFld: b([]string{"tab", "down"}, "tab", "next field"),
		PrevFld: b([]string{"shift+tab", "up"}, "shift+tab", "previous field"),
	}
}

// Global are the bindings every view honours, for the help view.
func (k KeyMap) Global() []key.Binding {
	return []key.Binding{k.Hosts, k.Models, k.Place, k.Chat, k.Events, k.Doctor, k.NextTab, k.Command, k.Help, k.Quit}
}
