package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
	"github.com/llmkube/mesh/tui/console"
)

// Schema names the version of every JSON document and NDJSON line the CLI prints. Fields are
// only ever added under it; a change that would break a reader gets a new schema name.
const Schema = "llmkube/v1"

// The JSON documents, one per command (the README's Scripting section shows them). Every one carries Schema.
type (
	// HostsDoc is `mesh hosts --json`: the mesh's members (agents; consoles too with --all).
	HostsDoc struct {
		Schema string       `json:"schema"`
		Mesh   string       `json:"mesh"`
		Mode   console.Mode `json:"mode"` // "member" (joined) or "agent" (through --agent)
		Hosts  []api.Member `json:"hosts"`
	}
	// PlacementsDoc is `mesh models --json`.
	PlacementsDoc struct {
		Schema     string          `json:"schema"`
		Placements []api.Placement `json:"placements"`
		// Intents are what the mesh keeps running, with how each is met.
		Intents []api.IntentStatus `json:"intents,omitempty"`
	}
	// PlacementDoc is `mesh place --json`: the placement as admitted (or, with --wait, as it
	// ended) and the error when it failed.
	PlacementDoc struct {
		Schema    string         `json:"schema"`
		Placement *api.Placement `json:"placement,omitempty"`
		Error     *JSONError     `json:"error,omitempty"`
	}
	// DeletedDoc is `mesh delete --json`: the placement as it was before the deletion.
	DeletedDoc struct {
		Schema  string        `json:"schema"`
		Deleted api.Placement `json:"deleted"`
	}
	// RankingDoc is `mesh rank --json`; Error is set (and the exit code is 3) when no host fits.
	RankingDoc struct {
		Schema  string          `json:"schema"`
		Ranking console.Ranking `json:"ranking"`
		Error   *JSONError      `json:"error,omitempty"`
	}
	// DoctorDoc is `mesh doctor --json`.
	DoctorDoc struct {
		Schema string         `json:"schema"`
		Doctor console.Doctor `json:"doctor"`
	}
	// TokenDoc is `mesh token --json`.
	TokenDoc struct {
		Schema    string `json:"schema"`
		Namespace string `json:"namespace"`
		Token     string `json:"token"`
	}
	// ErrorDoc is what any command prints with --json when it fails (as the last line of a
	// stream).
	ErrorDoc struct {
		Schema string     `json:"schema"`
		Error  *JSONError `json:"error"`
	}
	// JSONError is an error as scripts see it: the stable code (an API code such as
	// InsufficientMemory, or Usage, Unreachable, Timeout, Interrupted, Failed), the message,
	// what would fix it, and the exit code.
	JSONError struct {
		Code    api.Code `json:"code"`
		Message string   `json:"message"`
		Fix     string   `json:"fix,omitempty"`
		Exit    int      `json:"exit"`
	}
	// EventLine is one line of `mesh watch --json`: an api.Event and the schema.
	EventLine struct {
		Schema string `json:"schema"`
		api.Event
	}
	// ChatLine is one line of `mesh chat --json`: a piece of the answer as it arrives, then a
	// last line with Done set, the host that answered, why it stopped and the token usage.
	ChatLine struct {
		Schema       string               `json:"schema"`
		Delta        string               `json:"delta,omitempty"`
		Done         bool                 `json:"done,omitempty"`
		Model        string               `json:"model,omitempty"`
		Host         string               `json:"host,omitempty"`
		FinishReason string               `json:"finish_reason,omitempty"`
		Usage        *apiclient.ChatUsage `json:"usage,omitempty"`
	}
)

// jsonError is a failure as JSON, with secrets redacted like everything on stderr.
func (a *app) jsonError(f failure) *JSONError {
	return &JSONError{Code: f.err.Code, Message: a.red.string(f.err.Message), Fix: a.red.string(f.err.Fix), Exit: f.exit}
}

// errorOf is the JSON error of err, or nil.
func (a *app) errorOf(err error) *JSONError {
	if err == nil {
		return nil
	}
	return a.jsonError(classify(err, false))
}

// writeDoc prints the command's one JSON document, indented for people who read it too.
func (a *app) writeDoc(v any) error {
	a.docWritten = true
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// writeCompact prints one NDJSON line.
func (a *app) writeCompact(v any) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// table writes aligned columns. Cells are single-line: tabs and newlines become spaces.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, header ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)}
	t.row(header...)
	return t
}

var cellCleaner = strings.NewReplacer("\t", " ", "\n", " ", "\r", " ")

func (t *table) row(cells ...string) {
	for i, c := range cells {
		if c == "" {
			c = "-"
		}
		cells[i] = cellCleaner.Replace(c)
	}
	fmt.Fprintln(t.tw, strings.Join(cells, "\t"))
}

func (t *table) flush() error { return t.tw.Flush() }

// size is a size for people; "-" when unknown.
func size(b int64) string {
	if b <= 0 {
		return "-"
	}
	return api.FormatBytes(b)
}

// stateText is a placement's state with what a reader needs next to it.
func stateText(p api.Placement) string {
	switch {
	case p.Moving() != "" && p.Progress > 0:
		return fmt.Sprintf("%s %d%%", p.State, int(p.Progress*100))
	case p.Code != "" && (p.State.Terminal() || p.State == api.StateUnavailable):
		return string(p.State) + " (" + string(p.Code) + ")"
	}
	return string(p.State)
}

// runtimesText lists a host's engines: present ones, "(down)" when unhealthy.
func runtimesText(h *api.Host) string {
	var out []string
	for _, e := range h.Engines {
		if !e.Present {
			continue
		}
		s := string(e.Runtime)
		if !e.Healthy {
			s += "(down)"
		}
		out = append(out, s)
	}
	return strings.Join(out, ",")
}

func acceleratorsText(h *api.Host) string {
	var out []string
	for _, acc := range h.Accelerators {
		out = append(out, acc.Name)
	}
	return strings.Join(out, ",")
}

// hostsTable renders `mesh hosts`.
func hostsTable(w io.Writer, members []api.Member, withRole bool) error {
	head := []string{"HOST", "STATE", "OS/ARCH", "CHIP", "ACCELERATORS", "RUNTIMES", "FREE", "BUDGET", "TOTAL", "MODELS", "API"}
	if withRole {
		head = append([]string{"HOST", "ROLE"}, head[1:]...)
	}
	t := newTable(w, head...)
	for _, m := range members {
		cells := []string{m.Name, string(m.Liveness), "", "", "", "", "", "", "", "", ""}
		if h := m.Host; h != nil {
			cells[2] = h.OS + "/" + h.Arch
			if h.OS == "" {
				cells[2] = ""
			}
			if h.OnBattery {
				cells[1] += " (on battery)"
			}
			cells[3] = h.Chip
			cells[4] = acceleratorsText(h)
			cells[5] = runtimesText(h)
			cells[6] = size(h.Memory.Free())
			cells[7] = size(h.Memory.Budget)
			cells[8] = size(h.Memory.Total)
			cells[9] = fmt.Sprint(len(m.Placements))
			cells[10] = h.APIAddr
		}
		if withRole {
			cells = append([]string{m.Name, string(m.Role)}, cells[1:]...)
		}
		t.row(cells...)
	}
	return t.flush()
}

// placementsTable renders `mesh models`, `mesh place` and `mesh delete`.
func placementsTable(w io.Writer, ps []api.Placement) error {
	t := newTable(w, "ID", "MODEL", "HOST", "NAMESPACE", "RUNTIME", "STATE", "MEMORY", "SOURCE")
	for _, p := range ps {
		t.row(p.ID, p.Model, p.Host, p.Namespace, string(p.Runtime), stateText(p), size(p.Memory.Bytes), p.Source)
	}
	return t.flush()
}

// intentsList renders the intents under `mesh models`, one line each, as people say it:
// "qwen2.5:1.5b wants 2, has 1 (pi5-b dead 12s ago; re-placing on pi5-c)".
func intentsList(w io.Writer, ins []api.IntentStatus) error {
	if len(ins) == 0 {
		return nil
	}
	if _, err := fmt.Fprintln(w, "\nkept running:"); err != nil {
		return err
	}
	for _, in := range ins {
		if _, err := fmt.Fprintln(w, cellCleaner.Replace("  "+api.IntentLine(in))); err != nil {
			return err
		}
	}
	return nil
}

// rankingTable renders `mesh rank`: the size, then every host's verdict, best first.
func rankingTable(w io.Writer, r console.Ranking) error {
	est := r.Estimate
	var how []string // what is known of how it was sized: never an empty "( , …)"
	if est.Method != "" {
		how = append(how, est.Method)
	} else if est.Bytes <= 0 {
		how = append(how, "unknown")
	}
	if est.Device != "" && est.Device != api.DeviceHost {
		how = append(how, "on the "+est.Device+" device")
	}
	how = append(how, "sized by "+r.SizedBy)
	line := "size: " + size(est.Bytes) + " (" + strings.Join(how, ", ") + ")"
	if r.SizeCode == api.CodeNotFound {
		line = "no such model (asked " + r.SizedBy + ")"
	}
	if est.Detail != "" {
		line += ": " + est.Detail
	}
	if r.SizeError != "" {
		line += ": " + r.SizeError
	}
	if _, err := fmt.Fprintln(w, cellCleaner.Replace(line)); err != nil {
		return err
	}
	t := newTable(w, "HOST", "VERDICT", "NEED", "FREE", "RUNTIME", "REASON")
	for _, h := range r.Hosts {
		verdict := string(h.Verdict)
		if h.Code != "" {
			verdict += " (" + string(h.Code) + ")"
		}
		t.row(h.Host, verdict, size(h.Need), size(h.Free), string(h.Runtime), h.Reason)
	}
	return t.flush()
}

// doctorText renders `mesh doctor`: one finding per paragraph, errors first as the layer
// orders them, each with its fix and the members that saw it.
func doctorText(w io.Writer, d console.Doctor, agents int) error {
	fmt.Fprintf(w, "mode: %s, %d agent(s) visible, %d report(s) merged\n", d.Mode, agents, len(d.Agents))
	if len(d.Findings) == 0 {
		_, err := fmt.Fprintln(w, "no problems found")
		return err
	}
	for _, f := range d.Findings {
		problem := f.Problem
		if f.Detail != "" {
			problem += " (" + f.Detail + ")"
		}
		fmt.Fprintf(w, "%-7s  %s\n", f.Severity, cellCleaner.Replace(problem))
		if f.Fix != "" {
			fmt.Fprintf(w, "%-7s  fix: %s\n", "", cellCleaner.Replace(f.Fix))
		}
		if len(f.SeenBy) > 0 {
			fmt.Fprintf(w, "%-7s  seen by: %s\n", "", cellCleaner.Replace(strings.Join(f.SeenBy, ", ")))
		}
	}
	return nil
}

// eventText renders one event of `mesh watch`.
func eventText(ev api.Event) string {
	var b strings.Builder
	b.WriteString(ev.Time.Local().Format(time.TimeOnly))
	b.WriteString("  ")
	b.WriteString(orDash(ev.Subject()))
	b.WriteString("  ")
	b.WriteString(ev.Type)
	if ev.Code != "" {
		b.WriteString(" " + string(ev.Code))
	}
	if p := ev.Placement; p != nil {
		b.WriteString("  " + p.Model + " [" + p.ID + "] " + stateText(*p))
	}
	if ev.Message != "" {
		b.WriteString("  " + ev.Message)
	}
	if ev.Member != "" && ev.Host != "" && ev.Member != ev.Host {
		b.WriteString(" (seen by " + ev.Host + ")")
	}
	return cellCleaner.Replace(b.String())
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
