package api

import (
	"reflect"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Every string another host sends (names, OS, chip, reasons, model output) may carry terminal
// escape sequences: a title change, a cleared screen, a fake line, a hyperlink. These
// functions are the one place such strings are made safe for a terminal; a console applies
// them where remote data enters it (the API client, the mesh's decoders), so renderers only
// ever see printable text.

// Printable returns s as one printable line: escape sequences (CSI, OSC, DCS and the like,
// 7-bit or 8-bit) are removed whole, other control characters and bidirectional overrides are
// dropped, tabs and line breaks become spaces, and invalid UTF-8 becomes U+FFFD.
func Printable(s string) string { return printable(s, false) }

// PrintableText is Printable for text shown over several lines (model output, a log tail): it
// keeps line breaks and tabs.
func PrintableText(s string) string { return printable(s, true) }

func printable(s string, multiline bool) string {
	clean := true
	for _, r := range s {
		if r == utf8.RuneError || unsafeRune(r) && !(multiline && (r == '\n' || r == '\t')) {
			clean = false
			break
		}
	}
	if clean {
		return s // the common case allocates nothing
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			b.WriteRune(utf8.RuneError)
		case r == 0x1b: // ESC: skip the whole sequence it starts
			i += escapeLen(s[i+size:]) + size
			continue
		case r >= 0x80 && r <= 0x9f: // C1 controls; CSI, OSC, DCS, APC, PM and SOS start sequences
			switch r {
			case 0x9b:
				i += csiLen(s[i+size:]) + size
				continue
			case 0x90, 0x98, 0x9d, 0x9e, 0x9f:
				i += stringLen(s[i+size:]) + size
				continue
			}
		case r == '\n' || r == '\t' || r == '\r':
			if multiline && r != '\r' {
				b.WriteRune(r)
			} else if !multiline {
				b.WriteByte(' ')
			}
		case unsafeRune(r):
		default:
			b.WriteRune(r)
		}
		i += size
	}
	return b.String()
}

// unsafeRune: control characters (C0, DEL, C1) and the invisible characters that reorder or
// hide text (bidirectional overrides and isolates, as in "Trojan Source").
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return true
	}
	return !unicode.IsPrint(r) && !unicode.IsSpace(r) && !unicode.Is(unicode.Mn, r)
}

// escapeLen is the length of the rest of an escape sequence after its ESC.
func escapeLen(after string) int {
	if after == "" {
		return 0
	}
	switch after[0] {
	case '[':
		return 1 + csiLen(after[1:])
	case ']', 'P', 'X', '^', '_': // OSC, DCS, SOS, PM, APC: up to BEL or ST
		return 1 + stringLen(after[1:])
	}
	// A two- or three-character sequence: intermediates (0x20–0x2f), then one final byte.
	n := 0
	for n < len(after) && after[n] >= 0x20 && after[n] <= 0x2f {
		n++
	}
	if n < len(after) && after[n] >= 0x30 && after[n] <= 0x7e {
		n++
	}
	return n
}

// csiLen: parameter and intermediate bytes, then a final byte in 0x40–0x7e.
func csiLen(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 0x40 && c <= 0x7e {
			return i + 1
		} else if c < 0x20 || c > 0x3f && c < 0x40 || c > 0x7e {
			return i // malformed: stop here and let the rest be filtered one rune at a time
		}
	}
	return len(s)
}

// stringLen: a control string ends with BEL, ESC \ or the 8-bit ST (U+009C).
func stringLen(s string) int {
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == 0x07:
			return i + 1
		case s[i] == 0x1b:
			if i+1 < len(s) && s[i+1] == '\\' {
				return i + 2
			}
			return i
		case strings.HasPrefix(s[i:], "\u009c"):
			return i + len("\u009c")
		}
	}
	return len(s)
}

// Sanitize makes every string reachable from v (a pointer to a freshly decoded value: it is
// changed in place) Printable: struct fields, slices, arrays, maps and pointers are followed;
// byte slices and unexported fields are left alone.
func Sanitize(v any) {
	sanitize(reflect.ValueOf(v), 0)
}

func sanitize(v reflect.Value, depth int) {
	if depth > 32 {
		return // nothing the API sends is this deep; a cycle must not recurse forever
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			e := v.Elem()
			if v.Kind() == reflect.Interface && e.Kind() != reflect.Pointer {
				if e.Kind() == reflect.String && v.CanSet() {
					v.Set(reflect.ValueOf(Printable(e.String())).Convert(e.Type()))
				}
				return
			}
			sanitize(e, depth+1)
		}
	case reflect.String:
		if v.CanSet() {
			if s := v.String(); Printable(s) != s {
				v.SetString(Printable(s))
			}
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				sanitize(v.Field(i), depth+1)
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		for i := range v.Len() {
			sanitize(v.Index(i), depth+1)
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		for _, k := range v.MapKeys() {
			nk, ne := reflect.New(k.Type()).Elem(), reflect.New(v.Type().Elem()).Elem()
			nk.Set(k)
			ne.Set(v.MapIndex(k))
			sanitize(nk, depth+1)
			sanitize(ne, depth+1)
			v.SetMapIndex(k, reflect.Value{})
			v.SetMapIndex(nk, ne)
		}
	}
}

// Clip bounds s to n bytes, on a rune boundary, marking the cut with "…": what a caller sent is
// echoed in an error only so far.
func Clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
