package main

import (
	"fmt"
	"path/filepath"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/internal/seal"
)

// caCommand prints the mesh's CA certificate, which every keyholder derives from the secret.
func caCommand(e env) *cobra.Command {
	var stateDir, joinString, joinFile string
	cmd := &cobra.Command{
		Use:   "ca",
		Short: "Print the mesh's CA certificate (PEM), for HTTPS clients across the LAN",
		Long: `ca prints the certificate of the mesh's certificate authority, derived from the mesh secret:
every host of the mesh derives the same one. Agents serve the LAN over TLS with leaves it signs, so an
ordinary HTTPS client given it and a token reaches any agent securely:

  llmkube-agent ca > mesh-ca.pem
  curl --cacert mesh-ca.pem -H "Authorization: Bearer $TOKEN" https://10.0.0.5:7777/v1/models

(OpenAI and Ollama SDKs: SSL_CERT_FILE=mesh-ca.pem, or their client's CA option.) The certificate is
not secret; the join string it is derived from is. It reads the join string as run does:
--join-string, $` + envJoin + `, --join-file, or the state folder's mesh.json.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			j, err := caJoin(e, stateDir, joinString, joinFile)
			if err != nil {
				return err
			}
			ca, err := seal.NewCA(j.MeshID, j.Secret)
			if err != nil {
				return err
			}
			_, err = e.stdout.Write(ca.PEM())
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&stateDir, "state-dir", "", "the agent's state folder, whose mesh.json holds the join string (default: the agent's)")
	f.StringVar(&joinString, "join-string", "", "the mesh's join string; also $"+envJoin)
	f.StringVar(&joinFile, "join-file", "", "read the join string from this file")
	return cmd
}

// caJoin finds the join string for ca, without opening (and locking) the state folder: the
// agent running there holds it.
func caJoin(e env, stateDir, joinString, joinFile string) (api.Join, error) {
	if j, from, err := givenJoin(e, joinString, joinFile); err != nil || from != "" {
		return j, err
	}
	if stateDir == "" {
		d, err := defaultDirs(e, runtime.GOOS)
		if err != nil {
			return api.Join{}, err
		}
		stateDir = d.State
	}
	path := filepath.Join(stateDir, state.JoinFile)
	j, ok, err := state.LoadJoinFile(path)
	if err != nil {
		return api.Join{}, err
	}
	if !ok {
		return api.Join{}, usageError{fmt.Errorf("no join string: %s does not exist; give --join-string, $%s or --state-dir", path, envJoin)}
	}
	return j, nil
}
