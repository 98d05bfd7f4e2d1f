package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestCommandRunner(t *testing.T) {
	require.NoError(t, commandRunner("true")(t.Context()))
	err := commandRunner("ls /no/such/dir/for/the/test")(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "ls /no/such/dir/for/the/test: exit status")
	assert.Contains(t, err.Error(), "No such file", "the command's stderr is in the error")
}
