package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestParseContext(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "4096": 4096, "4k": 4096, "32K": 32768, " 8k ": 8192, "1024k": MaxContext, "1048576": MaxContext} {
		n, err := ParseContext(in)
		assert.NoError(t, err, in)
		assert.Equal(t, want, n, in)
	}
	for in, why := range map[string]string{"lots": "not a number", "-1": "not a number", "k": "not a number", "4m": "not a number",
		"1025k": "past the limit", "10485760": "past the limit", "99999999999999999999": "not a number"} {
		_, err := ParseContext(in)
		if assert.Error(t, err, in) {
			assert.Contains(t, err.Error(), why, in)
		}
	}
}
