package llamaserver

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
)

// Arg is an engine argument the driver lets through to llama-server. Engine arguments are an
// attack surface (--host 0.0.0.0, --api-key-file, --log-file /etc/…, --model-url): only those
// on the allowlist pass, with their values checked.
type Arg struct {
	Names []string // its spellings, the first the usual one: {"-ngl", "--n-gpu-layers", "--gpu-layers"}
	// Value says what the value must be ("N", "on|off|auto"); "" for a flag without value.
	Value string
	// Valid checks a value; nil for a flag without value.
	Valid func(string) bool
}

func nonNegative(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n >= 0
}

func positive(s string) bool {
	n, err := strconv.Atoi(s)
	return err == nil && n > 0
}

func oneOf(vals ...string) func(string) bool {
	return func(s string) bool { return slices.Contains(vals, s) }
}

var cacheTypes = []string{"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"}

// DefaultArgs is the allowlist when Config.ExtraArgs is nil: performance and memory knobs that
// change neither where the engine listens nor what files it reads or writes. (The driver sets
// -m, --host, --port, -c, -np, --cache-ram, --alias and --metrics itself; -np here asks for
// more slots, see memoryArgs.)
var DefaultArgs = []Arg{
	{Names: []string{"-ngl", "--n-gpu-layers", "--gpu-layers"}, Value: "N|auto|all",
		Valid: func(s string) bool { return nonNegative(s) || s == "auto" || s == "all" }},
	{Names: []string{"-t", "--threads"}, Value: "N", Valid: positive},
	{Names: []string{"-tb", "--threads-batch"}, Value: "N", Valid: positive},
	{Names: []string{"-b", "--batch-size"}, Value: "N", Valid: positive},
	{Names: []string{"-ub", "--ubatch-size"}, Value: "N", Valid: positive},
	{Names: slotFlags, Value: "1-" + strconv.Itoa(maxSlots), Valid: func(s string) bool {
		n, err := strconv.Atoi(s)
		return err == nil && n >= 1 && n <= maxSlots
	}},
	{Names: []string{"-fa", "--flash-attn"}, Value: "on|off|auto", Valid: oneOf("on", "off", "auto")},
	{Names: []string{"-ctk", "--cache-type-k"}, Value: strings.Join(cacheTypes, "|"), Valid: oneOf(cacheTypes...)},
	{Names: []string{"-ctv", "--cache-type-v"}, Value: strings.Join(cacheTypes, "|"), Valid: oneOf(cacheTypes...)},
	{Names: []string{"--mlock"}},
	{Names: []string{"--no-mmap"}},
	{Names: []string{"--jinja"}},
	{Names: []string{"--no-webui"}},
	// An embedding model: /v1/embeddings answers (with a pooling llama-server's OpenAI route
	// accepts: not "none").
	{Names: []string{"--embeddings", "--embedding"}},
	{Names: []string{"--pooling"}, Value: "mean|cls|last|rank", Valid: oneOf("mean", "cls", "last", "rank")},
}

// allowlist describes args for messages: "-ngl N|auto|all, -t N, --mlock, …".
func allowlist(args []Arg) string {
	parts := make([]string, len(args))
	for i, a := range args {
		parts[i] = strings.TrimSpace(a.Names[0] + " " + a.Value)
	}
	return strings.Join(parts, ", ")
}

// checkArgs validates extra arguments against the allowlist and returns them in the form
// llama-server reads: each value as the next argument ("--threads=4" becomes "--threads", "4",
// since llama-server refuses the = form).
func checkArgs(args []string, allowed []Arg) ([]string, error) {
	refuse := func(format string, a ...any) error {
		return &engines.Error{Code: api.CodeBadRequest, Err: fmt.Errorf(format+"; allowed: %s", append(a, allowlist(allowed))...)}
	}
	var out []string
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(args[i], "=")
		if !strings.HasPrefix(name, "-") {
			return nil, refuse("llama-server argument %q is not a flag", args[i])
		}
		var spec *Arg
		for j := range allowed {
			if slices.Contains(allowed[j].Names, name) {
				spec = &allowed[j]
				break
			}
		}
		if spec == nil {
			return nil, refuse("llama-server argument %q is not allowed", name)
		}
		if spec.Valid == nil {
			if hasValue {
				return nil, refuse("llama-server argument %s takes no value (got %q)", name, args[i])
			}
			out = append(out, name)
			continue
		}
		if !hasValue {
			if i+1 >= len(args) {
				return nil, refuse("llama-server argument %s needs a value: %s", name, spec.Value)
			}
			i++
			value = args[i]
		}
		if !spec.Valid(value) {
			return nil, refuse("llama-server argument %s %q is not valid: want %s", name, value, spec.Value)
		}
		out = append(out, name, value)
	}
	return out, nil
}

// slotFlags spell llama-server's slot count.
var slotFlags = []string{"-np", "--parallel"}

// maxSlots bounds -np: each slot holds a whole context, so a few dozen is already a lot of
// memory, and a larger number is a typo.
const maxSlots = 64

// takeSlots removes the slot count from checked arguments and returns it: 1 when none is asked.
func takeSlots(args []string) (int, []string) {
	slots, rest := 1, make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		if slices.Contains(slotFlags, args[i]) && i+1 < len(args) {
			slots, _ = strconv.Atoi(args[i+1])
			i++
			continue
		}
		rest = append(rest, args[i])
	}
	return max(slots, 1), rest
}

// Contexts is how many contexts of the model llama-server holds for these extra arguments:
// one per slot (-np), 1 by default. Arguments the allowlist refuses count as the default; the
// agent refuses them before it sizes anything.
func (d *Driver) Contexts(args []string) int {
	checked, err := checkArgs(args, d.cfg.ExtraArgs)
	if err != nil {
		return 1
	}
	n, _ := takeSlots(checked)
	return n
}

// memoryArgs are the arguments that decide llama-server's memory, always given explicitly:
// its defaults are what the estimate cannot follow. Left alone, a recent llama-server runs 4
// slots sharing one context (two concurrent long chats then fail "Context size has been
// exceeded") and keeps a host prompt cache of up to 8 GiB.
//   - Each slot gets the whole context a placement asked for: -c is context × slots and
//     --no-kv-unified splits it evenly (with a unified cache one request could take it all).
//   - The prompt cache is bounded by what the estimate counted (--cache-ram in whole MiB,
//     rounded down so the engine stays within the count; 0 turns it off).
func memoryArgs(context, slots int, cacheBytes int64) []string {
	args := []string{"-c", strconv.Itoa(context * slots), "-np", strconv.Itoa(slots)}
	if slots > 1 {
		args = append(args, "--no-kv-unified")
	}
	return append(args, "--cache-ram", strconv.FormatInt(max(cacheBytes, 0)>>20, 10))
}
