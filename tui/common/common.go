// Package common is what every view of the console shares: the Component contract (a tea.Model
// that can be sized and can say its keys, after soft-serve's pkg/ui/common), the shared Context
// pushed to children after each update (after gh-dash), and the messages that cross views.
package common

import (
	"errors"
	"time"

	"github.com/charmbracelet/bubbles/key"
	tea "github.com/charmbracelet/bubbletea"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/tui/console"
	"github.com/llmkube/mesh/tui/keymap"
	"github.com/llmkube/mesh/tui/styles"
)

// Component is a view or a widget.
type Component interface {
	tea.Model
	SetSize(width, height int)
	// ShortHelp lists the keys that matter now, for the footer.
	ShortHelp() []key.Binding
	// Capturing reports that the component is taking text input, so the root must not treat
	// letters as global keys.
	Capturing() bool
}

// Context is shared by all views: styles, keys, the latest mesh picture and history.
type Context struct {
	Styles *styles.Styles
	Keys   keymap.KeyMap
	// Mesh is the latest view of the mesh; views read it, the root replaces it.
	Mesh api.MeshView
	// Memory holds recent memory samples per host, for charts.
	Memory *History
	// Events are the most recent events, oldest first.
	Events []api.Event
	// Now is the clock views render against (tests fix it).
	Now func() time.Time
	// Recent are sources placed in this session, newest first (suggestions in Place).
	Recent []string
	// Conn reaches the mesh. Views call it only inside tea.Cmd closures, never in Update.
	Conn *console.Conn
	// next is the page switch a view asked for in its Update (Navigate), for the root to make
	// before it handles another message.
	next *Navigation
}

// ErrNotConnected is what a view's action answers when the console has no connection.
var ErrNotConnected = errors.New("not connected to a mesh")

// MaxEvents bounds Context.Events.
const MaxEvents = 500

// AddEvent appends an event, dropping the oldest past MaxEvents.
func (c *Context) AddEvent(e api.Event) {
	c.Events = append(c.Events, e)
	if over := len(c.Events) - MaxEvents; over > 0 {
		c.Events = append(c.Events[:0:0], c.Events[over:]...)
	}
}

// Page names a view.
type Page int

const (
	PageHosts Page = iota
	PageModels
	PagePlace
	PageChat
	PageEvents
	PageDoctor
	PageHostDetail
	PageHelp
)

// Tabs are the pages reachable with tab, in order.
var Tabs = []Page{PageHosts, PageModels, PagePlace, PageChat, PageEvents, PageDoctor}

// Title of a page, as shown in the tab bar.
func (p Page) Title() string {
	switch p {
	case PageHosts:
		return "Hosts"
	case PageModels:
		return "Models"
	case PagePlace:
		return "Place"
	case PageChat:
		return "Chat"
	case PageEvents:
		return "Events"
	case PageDoctor:
		return "Doctor"
	case PageHostDetail:
		return "Host"
	case PageHelp:
		return "Help"
	}
	return "?"
}

// Navigation is a switch to a page; Arg carries what it opens (a host name, a model, a source
// to place).
type Navigation struct {
	Page Page
	Arg  string
}

// Navigate asks the root to switch to page p, opening arg, as soon as the view's Update returns.
// It is not a command: a command's result comes back from its own goroutine, after the keys
// read with the one that asked (a fast typist's "enter hello", a paste), and those keys would
// go to the old page or be taken as global keys ("e" switching to Events).
func (c *Context) Navigate(p Page, arg string) { c.next = &Navigation{Page: p, Arg: arg} }

// TakeNavigation is the switch a view asked for since the last call, once.
func (c *Context) TakeNavigation() (Navigation, bool) {
	if c.next == nil {
		return Navigation{}, false
	}
	nav := *c.next
	c.next = nil
	return nav, true
}

// MeshMsg carries a new picture of the mesh.
type MeshMsg struct{ View api.MeshView }

// EventMsg carries one event from an agent or the mesh.
type EventMsg struct{ Event api.Event }

// TickMsg is the console's once-a-second clock (memory sampling, elapsed times).
type TickMsg time.Time

// StatusMsg shows a line in the status bar; Err makes it an error.
type StatusMsg struct {
	Text string
	Err  bool
}

// Status is a command that shows a status line.
func Status(text string, isErr bool) tea.Cmd {
	return func() tea.Msg { return StatusMsg{Text: text, Err: isErr} }
}

// HelpSection is a titled group of keys in the help view.
type HelpSection struct {
	Title string
	Keys  []key.Binding
}

// FullHelper is a view that lists all of its keys for the help view, grouped; a view without
// it is described by its ShortHelp.
type FullHelper interface {
	FullHelp() []HelpSection
}

// As is b described for one view ("enter" opens a host's details in Hosts, a chat in Models):
// the same keys, so the help cannot name a key the view does not handle.
func As(b key.Binding, desc string) key.Binding {
	return key.NewBinding(key.WithKeys(b.Keys()...), key.WithHelp(b.Help().Key, desc))
}

// Next is a command that waits for the next message of work a view's command started in a
// goroutine (a chat's stream, a placement's wait): each message carries the channel so the view
// re-arms Next, and a closed channel ends the loop.
func Next(ch <-chan tea.Msg) tea.Cmd {
	return func() tea.Msg {
		msg, ok := <-ch
		if !ok {
			return nil
		}
		return msg
	}
}
