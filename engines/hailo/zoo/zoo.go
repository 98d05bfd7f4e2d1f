// Package zoo knows hailo-ollama's model names across releases: the renames between them and
// whether a daemon's own list (/hailo/v1/list) offers a model. It has no dependencies, so the
// ranker (mesh/rank) can ask it as the driver (engines/hailo) does. The public record behind
// it is told in docs/raspberry-pi-hailo.md ("What changed between hailo-ollama releases").
package zoo

import "slices"

// renames are the zoo models later releases list under another name (the same HEF file):
// 5.1.1's name first, 5.3.0's second. llama3.2:1b (from 5.2.0) and qwen3:1.7b (from 5.3.0) are
// new models, not renames, and 5.1.1's llama3.2:3b has no later name.
var renames = [][2]string{
	{"qwen2.5-instruct:1.5b", "qwen2.5:1.5b"},
	{"deepseek_r1_distill_qwen:1.5b", "deepseek_r1:1.5b"},
}

// ServedName is the name the daemon, listing zoo, knows ref by: ref itself when listed, else
// its other name across a known rename when that one is listed, else ref (the daemon decides).
func ServedName(ref string, zoo []string) string {
	listed := func(n string) bool { return slices.Contains(zoo, n) }
	if listed(ref) {
		return ref
	}
	for _, r := range renames {
		for i, n := range r {
			if n == ref && listed(r[1-i]) {
				return r[1-i]
			}
		}
	}
	return ref
}

// Offers reports whether a hailo-ollama listing zoo can run ref, under its own name or across a
// known rename, and the name it would be run by. Ranking uses it against each host's own list.
func Offers(zoo []string, ref string) (string, bool) {
	name := ServedName(ref, zoo)
	if slices.Contains(zoo, name) {
		return name, true
	}
	return "", false
}
