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
// -m, --host, --port, -c, --alias and --metrics itself.)
var DefaultArgs = []Arg{
	{Names: []string{"-ngl", "--n-gpu-layers", "--gpu-layers"}, Value: "N|auto|all",
		Valid: func(s string) bool { return nonNegative(s) || s == "auto" || s == "all" }},
	{Names: []string{"-t", "--threads"}, Value: "N", Valid: positive},
	{Names: []string{"-tb", "--threads-batch"}, Value: "N", Valid: positive},
	{Names: []string{"-b", "--batch-size"}, Value: "N", Valid: positive},
	{Names: []string{"-ub", "--ubatch-size"}, Value: "N", Valid: positive},
	{Names: []string{"-np", "--parallel"}, Value: "N", Valid: positive},
	{Names: []string{"-fa", "--flash-attn"}, Value: "on|off|auto", Valid: oneOf("on", "off", "auto")},
	{Names: []string{"-ctk", "--cache-type-k"}, Value: strings.Join(cacheTypes, "|"), Valid: oneOf(cacheTypes...)},
	{Names: []string{"-ctv", "--cache-type-v"}, Value: strings.Join(cacheTypes, "|"), Valid: oneOf(cacheTypes...)},
	{Names: []string{"--mlock"}},
	{Names: []string{"--no-mmap"}},
	{Names: []string{"--jinja"}},
	{Names: []string{"--no-webui"}},
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
