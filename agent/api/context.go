package api

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxContext is the largest context, in tokens, a placement may ask for.
const MaxContext = 1 << 20

// ParseContext reads a context size as people write it: 4096, or 4k / 32K (thousands of 1024
// tokens, as model cards write them), or 0 for the runtime's default (DefaultContext). The
// console's form and the CLI's --context read it the same way.
func ParseContext(s string) (int, error) {
	t := strings.TrimSpace(s)
	mult := 1
	if n := len(t); n > 0 && (t[n-1] == 'k' || t[n-1] == 'K') {
		t, mult = t[:n-1], 1024
	}
	n, err := strconv.Atoi(t)
	switch {
	case err != nil || n < 0:
		return 0, fmt.Errorf("context %q is not a number of tokens: want 0 (the default, %d), a number like 8192, or 8k", s, DefaultContext)
	case n > MaxContext/mult:
		return 0, fmt.Errorf("context %q is past the limit of %d tokens (1024k)", s, MaxContext)
	}
	return n * mult, nil
}
