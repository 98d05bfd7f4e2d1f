package api

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
)

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"pi5":                              "pi5",
		"Raspberry Pi 5 Model B (BCM2712)": "Raspberry Pi 5 Model B (BCM2712)",
		"héllo wörld ✓ 日本":                 "héllo wörld ✓ 日本",
		"red\x1b[31mtext\x1b[0m":           "redtext",
		"title\x1b]0;owned\x07!":           "title!",
		"link\x1b]8;;http://x\x1b\\y":      "linky",
		"clear\x1b[2J\x1b[H":               "clear",
		"csi8\u009b31mx":                   "csi8x",
		"osc8\u009d0;t\u009cz":             "osc8z",
		"bell\x07 back\b del\x7f":          "bell back del",
		"two\nlines\ttab\r":                "two lines tab ",
		"bidi \u202egnp.exe":               "bidi gnp.exe",
		"bad \xff utf8":                    "bad \ufffd utf8",
		"trailing esc\x1b":                 "trailing esc",
		"esc(B charset\x1b(B":              "esc(B charset",
	} {
		assert.Equal(t, want, Printable(in), "%q", in)
	}
	assert.Equal(t, "line one\nline two\ttab", PrintableText("line one\nline two\ttab\r\x1b[2K"))
}

func FuzzPrintable(f *testing.F) {
	for _, s := range []string{"pi5", "\x1b[31mx", "\x1b]0;t\x07", "\u009b1m", "a\nb", "\xff\xfe", "\x1bP q\x1b\\"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, multi := range []bool{false, true} {
			out := printable(s, multi)
			if !utf8.ValidString(out) {
				t.Fatalf("%q: output %q is not UTF-8", s, out)
			}
			for _, r := range out {
				if unsafeRune(r) && !(multi && (r == '\n' || r == '\t')) {
					t.Fatalf("%q: output %q holds %U", s, out, r)
				}
			}
			if printable(out, multi) != out {
				t.Fatalf("%q: not idempotent: %q", s, out)
			}
			if len(out) > 3*len(s) {
				t.Fatalf("%q grew to %q", s, out)
			}
		}
	})
}

func TestSanitize(t *testing.T) {
	v := MeshView{Mesh: "m\x1b[2J", Members: []Member{{
		Name: "evil\x1b]0;x\x07", Role: Role("agent\x07"),
		Host:       &Host{Chip: "chip\x1b[31m", Engines: []Engine{{Detail: "d\x1b[1m", Models: []string{"m\x1b[0m"}}}},
		Placements: []Placement{{Model: "mod\u009b2J", Reason: "r\nr"}},
	}}}
	Sanitize(&v)
	assert.Equal(t, "m", v.Mesh)
	mb := v.Members[0]
	assert.Equal(t, "evil", mb.Name)
	assert.Equal(t, Role("agent"), mb.Role)
	assert.Equal(t, "chip", mb.Host.Chip)
	assert.Equal(t, "d", mb.Host.Engines[0].Detail)
	assert.Equal(t, "m", mb.Host.Engines[0].Models[0])
	assert.Equal(t, "mod", mb.Placements[0].Model)
	assert.Equal(t, "r r", mb.Placements[0].Reason)

	m := map[string][]string{"k\x1b[1m": {"v\x07"}}
	Sanitize(&m)
	assert.Equal(t, map[string][]string{"k": {"v"}}, m)
	assert.False(t, strings.ContainsRune(Printable(strings.Repeat("\x1b[", 1000)), 0x1b))
}
