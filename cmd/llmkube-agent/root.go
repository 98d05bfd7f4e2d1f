package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/state"
	"github.com/llmkube/mesh/agent/store"
	"github.com/llmkube/mesh/engines/routeprobe"
	"github.com/llmkube/mesh/hwprobe"
	"github.com/llmkube/mesh/version"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// usageError marks a mistake in the command line (exit 2) rather than a failure (exit 1).
type usageError struct{ error }

// env is the process environment as the commands see it (tests pass their own).
type env struct {
	getenv func(string) string
	stdout io.Writer
	stderr io.Writer
}

// run executes the command line args and returns the exit code.
func run(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	e := env{getenv: getenv, stdout: stdout, stderr: stderr}
	root := &cobra.Command{
		Use:           "llmkube-agent",
		Short:         "The llmkube mesh host agent",
		Long:          "llmkube-agent turns a host into a member of an llmkube mesh: it probes the host, runs models on llama-server, Ollama or hailo-ollama within a memory budget, and serves the agent API.",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       versionLine(),
	}
	// --version and `version` print the same line.
	root.SetVersionTemplate("llmkube-agent {{.Version}}\n")
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(commands(e)...)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return exitOK
	}
	fmt.Fprintln(stderr, "llmkube-agent:", err)
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") || strings.Contains(err.Error(), "arg(s)") {
		return exitUsage
	}
	return exitError
}

// newLogger builds the process logger: text or JSON on stderr.
// commands are llmkube-agent's subcommands.
func commands(e env) []*cobra.Command {
	return []*cobra.Command{runCommand(e), initCommand(e), probeHostCommand(e), probeCommand(e), serviceCommand(e), joinCommand(e), leaveCommand(e), caCommand(e), versionCommand(e)}
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, usageError{fmt.Errorf("--log-level %q: use debug, info, warn or error", level)}
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError{fmt.Errorf("--log-format %q: use text or json", format)}
}

// supportedOS refuses an OS the agent does not run on, saying so.
func supportedOS(goos string) error {
	switch goos {
	case "linux", "darwin":
		return nil
	}
	return fmt.Errorf("llmkube-agent runs on Linux and macOS; this host is %q, which is not supported", goos)
}

// defaultDirs is where state and models live unless flags say otherwise.
func defaultDirs(e env, goos string) (hwprobe.Dirs, error) {
	home, _ := os.UserHomeDir()
	if h := e.getenv("HOME"); h != "" {
		home = h
	}
	return hwprobe.DefaultDirs(goos, e.getenv, home)
}

func versionCommand(e env) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			fmt.Fprintf(e.stdout, "llmkube-agent %s\n", versionLine())
			return nil
		},
	}
}

// versionLine is the build's version, commit and date, the API version and the platform.
func versionLine() string {
	v := version.Get()
	return strings.Replace(v.String(), " "+v.Go, " API "+api.Version+" "+v.Go, 1)
}

func initCommand(e env) *cobra.Command {
	var meshID, stateDir string
	var force, allowTemp bool
	cmd := &cobra.Command{
		Use:   "init",
		Short: "Make a mesh secret and print its join string and admin token",
		Long: `init makes a new mesh: a random 32-byte secret and a mesh id, stored 0600 in the state dir
(mesh.json). It prints the join string (give it to other hosts: llmkube-agent run --join-string …,
or LLMKUBE_JOIN) and the admin token (for the console and scripts). Keep both secret.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if meshID == "" {
				id, err := api.NewMeshID()
				if err != nil {
					return err
				}
				meshID = id
			}
			if err := api.ValidMeshID(meshID); err != nil {
				return usageError{err}
			}
			if stateDir == "" {
				d, err := defaultDirs(e, runtime.GOOS)
				if err != nil {
					return err
				}
				stateDir = d.State
			}
			sd, err := openStateDir(stateDir, allowTemp)
			if err != nil {
				return err
			}
			defer sd.Close()
			if old, ok, err := sd.LoadJoin(); err != nil {
				return err
			} else if ok && !force {
				return fmt.Errorf("%s/%s already holds mesh %q; --force replaces it (hosts that joined with the old secret can then no longer talk to this one)", sd.Path(), state.JoinFile, old.MeshID)
			}
			secret, err := api.NewSecret()
			if err != nil {
				return err
			}
			j := api.Join{MeshID: meshID, Secret: secret}
			if err := sd.SaveJoin(j); err != nil {
				return err
			}
			fmt.Fprintf(e.stdout, "mesh:        %s\njoin string: %s\nadmin token: %s\nsaved in:    %s/%s\n",
				meshID, j.String(), api.AdminToken(secret), sd.Path(), state.JoinFile)
			fmt.Fprintln(e.stdout, "next:        llmkube-agent join JOIN-STRING, on this host (the mesh's first) and then on each other one")
			return nil
		},
	}
	cmd.Flags().StringVar(&meshID, "mesh-id", "", "mesh id: 1-32 of a-z, 0-9 and '-' (default: mesh-<random>)")
	cmd.Flags().StringVar(&stateDir, "state-dir", "", "state folder (default: $XDG_DATA_HOME/llmkube/agent; macOS: ~/Library/Application Support/llmkube/agent)")
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing mesh secret")
	cmd.Flags().BoolVar(&allowTemp, "allow-temp-store", false, "accept a state folder under the temporary folder (tests and demos only)")
	return cmd
}

// openStateDir checks the state folder like the model store (it holds the mesh secret) and
// opens it, taking its lock.
func openStateDir(dir string, allowTemp bool) (*state.Dir, error) {
	st, err := store.Open(dir, store.Options{GOOS: runtime.GOOS, AllowTemp: allowTemp, Label: "state folder", Flag: "--state-dir"})
	if err != nil {
		return nil, err
	}
	return state.Open(st.Path())
}

func probeHostCommand(e env) *cobra.Command {
	var asJSON bool
	var root, goos, arch string
	cmd := &cobra.Command{
		Use:   "probe-host",
		Short: "Show what this host has: OS, chip, memory (cgroup-aware), accelerators, default folders",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			info := hwprobe.Probe(cmd.Context(), hwprobe.Options{Root: root, OS: goos, Arch: arch})
			dirs, derr := defaultDirs(e, info.OS)
			if asJSON {
				out := struct {
					hwprobe.Info
					Dirs *hwprobe.Dirs `json:"dirs,omitempty"`
				}{Info: info}
				if derr == nil {
					out.Dirs = &dirs
				}
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(out)
			}
			if err := hwprobe.WriteTable(e.stdout, info); err != nil {
				return err
			}
			if derr == nil {
				fmt.Fprintf(e.stdout, "state dir  %s\nmodels dir %s\n", dirs.State, dirs.Models)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&root, "root", "/", "read the host's files under this folder (a recorded fixture)")
	cmd.Flags().StringVar(&goos, "os", "", "the probed host's OS (default: this one)")
	cmd.Flags().StringVar(&arch, "arch", "", "the probed host's architecture (default: this one)")
	return cmd
}

func probeCommand(e env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "probe URL",
		Short: "Check how an engine (hailo-ollama, Ollama, llama-server) answers the routes the drivers use",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			rep, err := routeprobe.Run(cmd.Context(), args[0], nil)
			if asJSON {
				enc := json.NewEncoder(e.stdout)
				enc.SetIndent("", "  ")
				if eerr := enc.Encode(rep); eerr != nil {
					return eerr
				}
			} else if len(rep.Routes) > 0 {
				if werr := rep.WriteTable(e.stdout); werr != nil {
					return werr
				}
			}
			if err != nil {
				return err
			}
			if n := rep.Differs(); n > 0 {
				return fmt.Errorf("%d route(s) of %s did not answer as the driver expects", n, rep.URL)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
