package api

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLabelsAreParsedBoundedAndMatched(t *testing.T) {
	l, err := ParseLabels([]string{"gpu=yes", " room=attic ", "empty="})
	require.NoError(t, err)
	assert.Equal(t, map[string]string{"gpu": "yes", "room": "attic", "empty": ""}, l)
	for _, bad := range [][]string{{"novalue"}, {"=v"}, {"k=v", "k=w"}, {"k=\x1b[31m"}, {"k=a b"}, {strings.Repeat("k", MaxLabelLen+1) + "=v"}} {
		_, err := ParseLabels(bad)
		assert.Error(t, err, "%q", bad)
	}
	many := make([]string, MaxLabels+1)
	for i := range many {
		many[i] = "k" + strings.Repeat("x", i) + "=v"
	}
	_, err = ParseLabels(many)
	assert.ErrorContains(t, err, "at most")

	assert.Empty(t, MissingLabel(l, map[string]string{"gpu": "yes"}))
	assert.Empty(t, MissingLabel(l, nil))
	assert.Equal(t, "gpu=no", MissingLabel(l, map[string]string{"gpu": "no", "zone": "x"}), "the first by key")
	assert.Equal(t, "zone=x", MissingLabel(nil, map[string]string{"zone": "x"}))
}
