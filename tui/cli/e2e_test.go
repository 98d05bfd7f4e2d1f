package cli_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/sim/gguf"
	"github.com/llmkube/mesh/sim/simtest"
	"github.com/llmkube/mesh/tui/cli"
	"github.com/llmkube/mesh/tui/console"
)

// decode unmarshals a command's one JSON document and checks its schema.
func decode[T any](t *testing.T, r result) T {
	t.Helper()
	var v T
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &v), "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	var s struct{ Schema string }
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &s))
	assert.Equal(t, cli.Schema, s.Schema)
	return v
}

// ndjson splits a stream's output into lines, each a JSON object with the schema.
func ndjson(t *testing.T, out string) []string {
	t.Helper()
	var lines []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		var s struct{ Schema string }
		require.NoError(t, json.Unmarshal(sc.Bytes(), &s), "line %q", sc.Text())
		assert.Equal(t, cli.Schema, s.Schema)
		lines = append(lines, sc.Text())
	}
	return lines
}

var hostNames = []string{"gpu-server", "mac-mini", "pi5-hailo"}

func TestE2EHosts(t *testing.T) {
	m := localMesh(t)
	for _, c := range connections(m) {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, t.Context(), c.env, "", "mesh", "hosts")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			assert.Empty(t, r.stderr, "quiet without --verbose")
			if c.name == "member" {
				v := runCLI(t, t.Context(), c.env, "", "mesh", "hosts", "--verbose", "--log-json")
				require.Equal(t, cli.ExitOK, v.code, v.stderr)
				assert.Contains(t, v.stderr, `"level":"DEBUG"`, "--verbose logs the mesh's work to stderr")
				assert.Equal(t, r.stdout[:strings.Index(r.stdout, "\n")], v.stdout[:strings.Index(v.stdout, "\n")], "and the data stays on stdout")
			}
			lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
			require.Len(t, lines, 4)
			assert.Regexp(t, `^HOST\s+STATE\s+OS/ARCH\s+CHIP`, lines[0])
			for i, name := range hostNames {
				assert.Regexp(t, `^`+name+`\s+alive\s`, lines[i+1])
			}
			assert.Contains(t, lines[3], "Hailo-10H")
			assert.Contains(t, lines[3], "hailo-ollama")

			doc := decode[cli.HostsDoc](t, runCLI(t, t.Context(), c.env, "", "mesh", "hosts", "--json"))
			assert.Equal(t, "local", doc.Mesh)
			assert.Equal(t, console.Mode(c.name), doc.Mode)
			require.Len(t, doc.Hosts, 3)
			for i, h := range doc.Hosts {
				assert.Equal(t, hostNames[i], h.Name)
				assert.Equal(t, api.RoleAgent, h.Role)
				assert.Equal(t, api.Alive, h.Liveness)
				require.NotNil(t, h.Host)
				assert.Equal(t, m.Host(h.Name).Node.APIAddr(), h.Host.APIAddr)
				assert.Positive(t, h.Host.Memory.Budget)
			}

			// --all adds the consoles: in member mode this one, once its own join has been
			// processed, and consoles of earlier commands still leaving.
			require.Eventually(t, func() bool {
				all := decode[cli.HostsDoc](t, runCLI(t, t.Context(), c.env, "", "mesh", "hosts", "--all", "--json"))
				consoles := 0
				for _, h := range all.Hosts {
					if h.Role == api.RoleConsole {
						consoles++
					}
				}
				return len(all.Hosts) == 3+consoles && (consoles > 0 || c.name == "agent")
			}, 10*time.Second, 10*time.Millisecond)
		})
	}
}

// rank, place --wait, models, chat (text, stdin, NDJSON), delete, and the not-found that follows.
func TestE2EPlaceChatDelete(t *testing.T) {
	m := localMesh(t)
	const source, model = "ollama://qwen2.5:0.5b", "qwen2.5:0.5b"
	for _, c := range connections(m) {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { clearPlacements(t, m) })
			ctx := t.Context()

			rk := decode[cli.RankingDoc](t, runCLI(t, ctx, c.env, "", "mesh", "rank", source, "--json"))
			assert.Nil(t, rk.Error)
			assert.Equal(t, "gpu-server", rk.Ranking.SizedBy)
			assert.Positive(t, rk.Ranking.Estimate.Bytes)
			require.Len(t, rk.Ranking.Hosts, 3)
			assert.Equal(t, "gpu-server", rk.Ranking.Hosts[0].Host)
			assert.Equal(t, api.VerdictFits, rk.Ranking.Hosts[0].Verdict)
			for _, h := range rk.Ranking.Hosts[1:] {
				assert.Equal(t, api.VerdictRefused, h.Verdict, h.Host)
				assert.Equal(t, api.CodeEngineUnavailable, h.Code, h.Host)
			}
			r := runCLI(t, ctx, c.env, "", "mesh", "rank", source)
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			assert.Regexp(t, `(?m)^size: \S+ \S+ \(\w+, sized by gpu-server\)`, r.stdout)
			assert.Regexp(t, `(?m)^gpu-server\s+fits\s`, r.stdout)

			// Neither --host nor --auto: the one host that fits.
			r = runCLI(t, ctx, c.env, "", "mesh", "place", source, "--wait", "--json")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			placed := decode[cli.PlacementDoc](t, r)
			require.NotNil(t, placed.Placement)
			assert.Nil(t, placed.Error)
			p := *placed.Placement
			assert.Equal(t, api.StateReady, p.State)
			assert.Equal(t, "gpu-server", p.Host)
			assert.Equal(t, model, p.Model)
			assert.Contains(t, r.stderr, "the one host that fits: gpu-server")
			assert.Contains(t, r.stderr, "placed "+model+" on gpu-server as "+p.ID)
			assert.Contains(t, r.stderr, "gpu-server: ready")

			// The view shows it, once gossip has carried it to the member that answers.
			require.Eventually(t, func() bool {
				doc := decode[cli.PlacementsDoc](t, runCLI(t, ctx, c.env, "", "mesh", "models", "--json"))
				return len(doc.Placements) == 1 && doc.Placements[0].ID == p.ID && doc.Placements[0].State == api.StateReady
			}, 10*time.Second, 50*time.Millisecond)
			r = runCLI(t, ctx, c.env, "", "mesh", "models", "--host", "gpu-server")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			assert.Regexp(t, `(?m)^`+p.ID+`\s+`+model+`\s+gpu-server\s+default\s+ollama\s+ready\s`, r.stdout)
			assert.Empty(t, decode[cli.PlacementsDoc](t, runCLI(t, ctx, c.env, "", "mesh", "models", "--host", "mac-mini", "--json")).Placements)

			// Chat: the answer streams to stdout and ends with a newline.
			r = runCLI(t, ctx, c.env, "", "mesh", "chat", model, "Why is the sky blue?", "--max-tokens", "16", "--seed", "7")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			assert.NotEmpty(t, strings.TrimSpace(r.stdout))
			assert.True(t, strings.HasSuffix(r.stdout, "\n"))
			assert.Empty(t, r.stderr)

			r = runCLI(t, ctx, c.env, "Name three colours.", "mesh", "chat", model, "-", "--system", "Be brief.", "--json")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			lines := ndjson(t, r.stdout)
			require.GreaterOrEqual(t, len(lines), 2, "pieces, then the last line")
			var text strings.Builder
			for _, l := range lines[:len(lines)-1] {
				var cl cli.ChatLine
				require.NoError(t, json.Unmarshal([]byte(l), &cl))
				assert.False(t, cl.Done)
				text.WriteString(cl.Delta)
			}
			assert.NotEmpty(t, strings.TrimSpace(text.String()))
			var last cli.ChatLine
			require.NoError(t, json.Unmarshal([]byte(lines[len(lines)-1]), &last))
			assert.True(t, last.Done)
			assert.Equal(t, model, last.Model)
			assert.Equal(t, "gpu-server", last.Host)
			assert.NotEmpty(t, last.FinishReason)

			// Delete by id prefix; then the id is gone: exit 4.
			r = runCLI(t, ctx, c.env, "", "mesh", "delete", p.ID[:8], "--json")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			assert.Equal(t, p.ID, decode[cli.DeletedDoc](t, r).Deleted.ID)
			_, err := m.Client("gpu-server").Placement(ctx, p.ID)
			var ae *api.Error
			require.ErrorAs(t, err, &ae)
			assert.Equal(t, api.CodeNotFound, ae.Code)

			r = runCLI(t, ctx, c.env, "", "mesh", "delete", p.ID, "--json")
			assert.Equal(t, cli.ExitNotFound, r.code, r.stderr)
			assert.Equal(t, api.CodeNotFound, decodeError(t, r.stdout).Code)
			assert.Contains(t, r.stderr, "NotFound")
		})
	}
}

func TestE2ERefusalsAndNotFound(t *testing.T) {
	m := localMesh(t)
	for _, c := range connections(m) {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { clearPlacements(t, m) })
			ctx := t.Context()

			// The agent refuses: exit 3, the reason on stderr and in the JSON.
			r := runCLI(t, ctx, c.env, "", "mesh", "place", "hailo://qwen2:1.5b", "--host", "gpu-server", "--json")
			assert.Equal(t, cli.ExitRefused, r.code, r.stderr)
			e := decodeError(t, r.stdout)
			assert.Equal(t, api.CodeAcceleratorMissing, e.Code)
			assert.Equal(t, cli.ExitRefused, e.Exit)
			assert.NotEmpty(t, e.Fix)
			assert.Contains(t, r.stderr, "AcceleratorMissing: "+e.Message)

			// Past the context the model was trained for (128k): every host refuses, as every
			// agent would; place --auto and rank refuse alike.
			huge := []string{"ollama://llama3.2:3b", "--context", "1024k"}
			r = runCLI(t, ctx, c.env, "", append([]string{"mesh", "place", "--auto", "--json"}, huge...)...)
			assert.Equal(t, cli.ExitRefused, r.code, r.stderr)
			assert.Equal(t, api.CodeContextLimit, decodeError(t, r.stdout).Code)
			r = runCLI(t, ctx, c.env, "", append([]string{"mesh", "rank", "--json"}, huge...)...)
			assert.Equal(t, cli.ExitRefused, r.code, r.stderr)
			rk := decode[cli.RankingDoc](t, r)
			require.NotNil(t, rk.Error, "the ranking carries the refusal")
			assert.Equal(t, api.CodeContextLimit, rk.Error.Code)
			assert.Len(t, rk.Ranking.Hosts, 3)
			assert.Contains(t, r.stderr, "no host can take it")

			// An invalid source is refused before anything is pulled.
			r = runCLI(t, ctx, c.env, "", "mesh", "place", "ftp://example.com/x.gguf", "--host", "mac-mini", "--json")
			assert.Equal(t, cli.ExitRefused, r.code, r.stderr)
			assert.Equal(t, api.CodeInvalidSource, decodeError(t, r.stdout).Code)

			// Not found: a host, a placement, a model.
			r = runCLI(t, ctx, c.env, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--host", "no-such-host", "--json")
			assert.Equal(t, cli.ExitNotFound, r.code, r.stderr)
			assert.Equal(t, api.CodeNotFound, decodeError(t, r.stdout).Code)
			r = runCLI(t, ctx, c.env, "", "mesh", "models", "--host", "no-such-host")
			assert.Equal(t, cli.ExitNotFound, r.code, r.stderr)
			assert.Contains(t, r.stderr, `no agent "no-such-host"`)
			r = runCLI(t, ctx, c.env, "", "mesh", "delete", "p-0123456789ab")
			assert.Equal(t, cli.ExitNotFound, r.code, r.stderr)
			r = runCLI(t, ctx, c.env, "", "mesh", "chat", "no-such-model", "hi", "--json")
			assert.Equal(t, cli.ExitNotFound, r.code, r.stderr)
			assert.Equal(t, api.CodeNotFound, decodeError(t, r.stdout).Code)

			// Nothing was placed by any of it.
			assert.Empty(t, decode[cli.PlacementsDoc](t, runCLI(t, ctx, c.env, "", "mesh", "models", "--json")).Placements)
		})
	}
}

// A placement that fails after admission: --wait exits 1 with the placement and the error.
func TestE2EWaitFailure(t *testing.T) {
	m := localMesh(t)
	// A model server whose header answers range requests (so the agent sizes and admits the
	// model) and whose download fails.
	model := filepath.Join(t.TempDir(), "tiny.gguf")
	require.NoError(t, gguf.Write(model, gguf.Presets()[0]))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rg := r.Header.Get("Range"); r.Method == http.MethodGet && (rg == "" || strings.HasSuffix(rg, "-")) {
			http.Error(w, "disk on fire", http.StatusForbidden)
			return
		}
		http.ServeFile(w, r, model)
	}))
	t.Cleanup(srv.Close)
	for _, c := range connections(m) {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { clearPlacements(t, m) })
			r := runCLI(t, t.Context(), c.env, "", "mesh", "place", srv.URL+"/tiny.gguf", "--host", "mac-mini", "--wait", "--json")
			require.Equal(t, cli.ExitFailed, r.code, r.stderr)
			doc := decode[cli.PlacementDoc](t, r)
			require.NotNil(t, doc.Placement)
			require.NotNil(t, doc.Error)
			assert.Equal(t, api.StateFailed, doc.Placement.State)
			assert.Equal(t, api.CodePullFailed, doc.Error.Code)
			assert.Equal(t, cli.ExitFailed, doc.Error.Exit)
			assert.Contains(t, r.stderr, "mac-mini: failed (PullFailed)")
			assert.Contains(t, r.stderr, "server answered HTTP 403")
			assert.NotContains(t, r.stderr, "disk on fire", "a remote body never comes back in a failure")
		})
	}
}

// watch sees a placement's events as NDJSON, filtered by type, and Ctrl-C ends it with exit 0.
func TestE2EWatch(t *testing.T) {
	m := localMesh(t)
	for _, c := range connections(m) {
		t.Run(c.name, func(t *testing.T) {
			t.Cleanup(func() { clearPlacements(t, m) })
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var out, errb simtest.Buffer
			done := make(chan int, 1)
			go func() {
				done <- cli.Run(ctx, []string{"mesh", "watch", "--json", "--type", "placement,deleted"}, strings.NewReader(""), &out, &errb,
					cli.Options{Getenv: func(k string) string { return c.env[k] }})
			}()
			if !assert.Eventually(t, func() bool { return strings.Contains(errb.String(), "watching mesh local: 3 agent(s)") },
				10*time.Second, 10*time.Millisecond) {
				t.Fatalf("the watch did not start as expected; its stderr: %s", errb.String())
			}

			// It says it watches once every agent's stream is open: the placement's events are all
			// there.
			r := runCLI(t, t.Context(), c.env, "", "mesh", "place", "hailo://qwen2:1.5b", "--host", "pi5-hailo", "--wait", "--json")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			id := decode[cli.PlacementDoc](t, r).Placement.ID
			require.Eventually(t, func() bool {
				return strings.Contains(out.String(), `"id":"`+id+`"`) && strings.Contains(out.String(), `"state":"ready"`)
			}, 5*time.Second, 10*time.Millisecond, "the watch never saw the placement ready: %s", out.String())
			require.Equal(t, cli.ExitOK, runCLI(t, t.Context(), c.env, "", "mesh", "delete", id).code)
			require.Eventually(t, func() bool { return strings.Contains(out.String(), `"type":"deleted"`) }, 5*time.Second, 10*time.Millisecond)

			cancel() // Ctrl-C
			select {
			case code := <-done:
				assert.Equal(t, cli.ExitOK, code, errb.String())
			case <-time.After(10 * time.Second):
				t.Fatal("watch did not end on Ctrl-C")
			}
			var sawReady bool
			for _, l := range ndjson(t, out.String()) {
				var ev cli.EventLine
				require.NoError(t, json.Unmarshal([]byte(l), &ev))
				assert.Contains(t, []string{api.EventPlacement, api.EventDeleted}, ev.Type, "--type filters")
				assert.NotZero(t, ev.Seq)
				if ev.Placement != nil && ev.Placement.ID == id && ev.Placement.State == api.StateReady {
					assert.Equal(t, "pi5-hailo", ev.Host)
					sawReady = true
				}
			}
			assert.True(t, sawReady)
		})
	}
}

func TestE2EDoctor(t *testing.T) {
	m := localMesh(t)
	for _, c := range connections(m) {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, t.Context(), c.env, "", "mesh", "doctor", "--json")
			require.Equal(t, cli.ExitOK, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
			doc := decode[cli.DoctorDoc](t, r)
			assert.Equal(t, c.name, doc.Doctor.Mode)
			for _, f := range doc.Doctor.Findings {
				assert.NotEqual(t, "error", f.Severity, f.Problem)
			}
			r = runCLI(t, t.Context(), c.env, "", "mesh", "doctor")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			assert.Contains(t, r.stdout, "mode: "+c.name+", 3 agent(s) visible")
			if c.name == "member" {
				assert.ElementsMatch(t, []string{"gpu-server", "mac-mini", "pi5-hailo"}, doc.Doctor.Agents, "every agent's report merged")
			} else {
				assert.Len(t, doc.Doctor.Agents, 1, "the agent watched through")
			}
		})
	}
}

// A namespace token minted by `mesh token` sees and uses only its namespace, joined or not.
func TestE2ENamespaceToken(t *testing.T) {
	m := localMesh(t)
	t.Cleanup(func() { clearPlacements(t, m) })
	ctx := t.Context()
	admin := connections(m)[1].env
	r := runCLI(t, ctx, map[string]string{"LLMKUBE_JOIN": m.JoinString()}, "", "mesh", "token", "--namespace", "team-a")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	teamA := strings.TrimSpace(r.stdout)

	r = runCLI(t, ctx, admin, "", "mesh", "place", "ollama://qwen2.5:0.5b", "--host", "gpu-server", "--wait", "--json")
	require.Equal(t, cli.ExitOK, r.code, r.stderr)
	other := decode[cli.PlacementDoc](t, r).Placement

	for _, c := range connections(m) {
		t.Run(c.name, func(t *testing.T) {
			env := with(c.env, "LLMKUBE_TOKEN", teamA)
			// The default namespace's placement is invisible, and cannot be deleted.
			assert.Empty(t, decode[cli.PlacementsDoc](t, runCLI(t, ctx, env, "", "mesh", "models", "--json")).Placements)
			r := runCLI(t, ctx, env, "", "mesh", "delete", other.ID)
			assert.Equal(t, cli.ExitNotFound, r.code, r.stderr)
			// Its own namespace it may use; another it may not.
			r = runCLI(t, ctx, env, "", "mesh", "place", "hailo://qwen2:1.5b", "--host", "pi5-hailo", "--namespace", "team-b", "--json")
			assert.Equal(t, cli.ExitFailed, r.code, r.stderr)
			assert.Equal(t, api.CodeForbidden, decodeError(t, r.stdout).Code)
			r = runCLI(t, ctx, env, "", "mesh", "place", "hailo://qwen2:1.5b", "--host", "pi5-hailo", "--namespace", "team-a", "--wait", "--json")
			require.Equal(t, cli.ExitOK, r.code, r.stderr)
			mine := decode[cli.PlacementDoc](t, r).Placement
			require.Eventually(t, func() bool {
				ps := decode[cli.PlacementsDoc](t, runCLI(t, ctx, env, "", "mesh", "models", "--json")).Placements
				return len(ps) == 1 && ps[0].ID == mine.ID
			}, 10*time.Second, 50*time.Millisecond)
			require.Equal(t, cli.ExitOK, runCLI(t, ctx, env, "", "mesh", "delete", mine.ID).code)
			// Gone from every view before the next way of connecting looks (a deletion may
			// still be stopping the engine, and gossip carries it).
			require.Eventually(t, func() bool {
				return len(decode[cli.PlacementsDoc](t, runCLI(t, ctx, env, "", "mesh", "models", "--json")).Placements) == 0
			}, 10*time.Second, 50*time.Millisecond)
		})
	}
	// A token the mesh did not mint is refused: exit 1, joined or not.
	for _, c := range connections(m) {
		r := runCLI(t, ctx, with(c.env, "LLMKUBE_TOKEN", "llmk_ns_team-a_00"), "", "mesh", "models", "--json")
		assert.Equal(t, cli.ExitFailed, r.code, "%s: %s", c.name, r.stderr)
		assert.Equal(t, api.CodeUnauthorized, decodeError(t, r.stdout).Code, c.name)
	}
}
