package main

import (
	"crypto/x509"
	"encoding/pem"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

func TestCAPrintsTheSameCertificateFromEveryCopyOfTheJoinString(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	code, out, errOut := runCmd(t, "init", "--mesh-id", "home", "--state-dir", dir, "--allow-temp-store")
	require.Equal(t, exitOK, code, errOut)
	var join string
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "join string: "); ok {
			join = v
		}
	}
	code, fromDir, errOut := runCmd(t, "ca", "--state-dir", dir)
	require.Equal(t, exitOK, code, errOut)
	code, fromString, errOut := runCmd(t, "ca", "--join-string", join)
	require.Equal(t, exitOK, code, errOut)
	require.Equal(t, fromDir, fromString, "two keyholders print different CA certificates")
	blk, _ := pem.Decode([]byte(fromDir))
	require.NotNil(t, blk)
	c, err := x509.ParseCertificate(blk.Bytes)
	require.NoError(t, err)
	require.True(t, c.IsCA)
	require.NotContains(t, fromDir, join)
	j, err := api.ParseJoin(join)
	require.NoError(t, err)
	require.NotContains(t, fromDir, api.AdminToken(j.Secret))

	code, _, errOut = runCmd(t, "ca", "--state-dir", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, exitUsage, code)
	require.Contains(t, errOut, "no join string")
}
