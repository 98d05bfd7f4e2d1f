package llamaserver

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/engines"
	"github.com/llmkube/mesh/engines/sizing"
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
	// Size records what the argument changes in the memory a placement is sized for. An
	// argument that changes none of what the estimate counts says so with NoMemory instead;
	// one with neither cannot be sized, and a placement giving it is refused.
	Size     func(r *sizing.Run, value string)
	NoMemory bool
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

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// DefaultArgs is the allowlist when Config.ExtraArgs is nil: performance and memory knobs that
// change neither where the engine listens nor what files it reads or writes. (The driver sets
// -m, --host, --port, -c, -np, --cache-ram, --alias and --metrics itself; -np here asks for
// more slots, see memoryArgs.) Why those marked NoMemory change nothing the estimate counts is
// in sizing's fromHeader: it counts every layer and every weight in host memory (-ngl, --mlock,
// --no-mmap), and an output for every token of a micro-batch (--embeddings, --pooling).
var DefaultArgs = []Arg{
	{Names: []string{"-ngl", "--n-gpu-layers", "--gpu-layers"}, Value: "N|auto|all",
		Valid: func(s string) bool { return nonNegative(s) || s == "auto" || s == "all" }, NoMemory: true},
	{Names: []string{"-t", "--threads"}, Value: "N", Valid: positive, NoMemory: true},
	{Names: []string{"-tb", "--threads-batch"}, Value: "N", Valid: positive, NoMemory: true},
	{Names: []string{"-b", "--batch-size"}, Value: "N", Valid: positive,
		Size: func(r *sizing.Run, v string) { r.Batch = atoi(v) }},
	{Names: []string{"-ub", "--ubatch-size"}, Value: "N", Valid: positive,
		Size: func(r *sizing.Run, v string) { r.UBatch = atoi(v) }},
	{Names: slotFlags, Value: "1-" + strconv.Itoa(maxSlots), Valid: func(s string) bool {
		n, err := strconv.Atoi(s)
		return err == nil && n >= 1 && n <= maxSlots
	}, Size: func(r *sizing.Run, v string) { r.Slots = atoi(v) }},
	{Names: []string{"-fa", "--flash-attn"}, Value: "on|off|auto", Valid: oneOf("on", "off", "auto"),
		Size: func(r *sizing.Run, v string) { r.FlashAttn = v }},
	{Names: []string{"-ctk", "--cache-type-k"}, Value: strings.Join(sizing.CacheTypes, "|"), Valid: oneOf(sizing.CacheTypes...),
		Size: func(r *sizing.Run, v string) { r.CacheK = v }},
	{Names: []string{"-ctv", "--cache-type-v"}, Value: strings.Join(sizing.CacheTypes, "|"), Valid: oneOf(sizing.CacheTypes...),
		Size: func(r *sizing.Run, v string) { r.CacheV = v }},
	{Names: []string{"--mlock"}, NoMemory: true},
	{Names: []string{"--no-mmap"}, NoMemory: true},
	{Names: []string{"--jinja"}, NoMemory: true},
	{Names: []string{"--no-webui"}, NoMemory: true},
	// An embedding model: /v1/embeddings answers (with a pooling llama-server's OpenAI route
	// accepts: not "none").
	{Names: []string{"--embeddings", "--embedding"}, NoMemory: true},
	{Names: []string{"--pooling"}, Value: "mean|cls|last|rank", Valid: oneOf("mean", "cls", "last", "rank"), NoMemory: true},
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
		spec := findArg(allowed, name)
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

// findArg is the allowed argument spelled name, or nil.
func findArg(allowed []Arg, name string) *Arg {
	for j := range allowed {
		if slices.Contains(allowed[j].Names, name) {
			return &allowed[j]
		}
	}
	return nil
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

// SizeRun is what the extra arguments change in the memory a placement is sized for (see
// Arg.Size). Arguments the allowlist refuses are refused here too, and an allowed argument
// that cannot be sized is refused with MemoryCheckFailed: the estimate would not be what the
// engine holds.
func (d *Driver) SizeRun(args []string) (sizing.Run, error) {
	var run sizing.Run
	checked, err := checkArgs(args, d.cfg.ExtraArgs)
	if err != nil {
		return run, err
	}
	for i := 0; i < len(checked); i++ {
		spec := findArg(d.cfg.ExtraArgs, checked[i])
		value := ""
		if spec.Valid != nil {
			i++
			value = checked[i]
		}
		switch {
		case spec.Size != nil:
			spec.Size(&run, value)
		case !spec.NoMemory:
			return run, &engines.Error{Code: api.CodeMemoryCheckFailed,
				Err: fmt.Errorf("llama-server argument %s changes memory in a way the estimate cannot count", spec.Names[0])}
		}
	}
	return run, nil
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
