package enginetest

// KeyPaths adds to out the path of every member of a decoded JSON document, arrays marked "[]"
// ("choices[].delta.content"): what conformance tests compare between a simulator's answer and
// the real engine's.
func KeyPaths(v any, prefix string, out map[string]bool) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			out[p] = true
			KeyPaths(e, p, out)
		}
	case []any:
		for _, e := range x {
			KeyPaths(e, prefix+"[]", out)
		}
	}
}
