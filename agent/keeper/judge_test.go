package keeper

import (
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/intent"
)

var t0 = time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)

// keeperOf is host self's keeper, as far as judging goes.
func keeperOf(self string) *Keeper {
	return &Keeper{cfg: Config{Grace: 3 * time.Second, Backoff: 5 * time.Second, BackoffMax: time.Minute, Log: slog.New(slog.DiscardHandler)},
		self: self, deadSince: map[string]time.Time{}, notes: map[string]string{}, placing: map[string]bool{}, deleting: map[string]bool{}}
}

func wants(n int) api.Intent {
	return api.Intent{PlacementRequest: api.PlacementRequest{Namespace: "default", Name: "qwen", Source: "ollama://qwen:latest", Runtime: api.RuntimeOllama, Replicas: n},
		Need: 1 << 30, Version: 1, Origin: "a", UpdatedAt: t0.Add(-time.Minute)}
}

// agentOf is an alive agent with free GiB of budget free and Ollama, holding ps.
func agentOf(name string, free int64, live api.Liveness, ps ...api.Placement) api.Member {
	for i := range ps {
		ps[i].Host, ps[i].Namespace, ps[i].Model = name, "default", "qwen"
		if ps[i].Source == "" {
			ps[i].Source = "ollama://qwen:latest"
		}
		if ps[i].ID == "" {
			ps[i].ID = "p-" + name
		}
	}
	h := &api.Host{Name: name, Memory: api.Memory{Budget: free << 30}, Engines: []api.Engine{{Runtime: api.RuntimeOllama, Present: true, Healthy: true}}}
	return api.Member{Name: name, Role: api.RoleAgent, Liveness: live, Host: h, Placements: ps}
}

func ready(created time.Time) api.Placement {
	return api.Placement{State: api.StateReady, CreatedAt: created}
}

// Every agent decides the same from the same view: exactly one places the missing replica, the
// best-ranked host that fits and holds none (c: the tightest fit); a dead host's replica does not
// count, a suspect one's does.
func TestEveryAgentChoosesTheSameHost(t *testing.T) {
	members := []api.Member{
		agentOf("a", 8, api.Alive, ready(t0.Add(-time.Hour))),
		agentOf("b", 8, api.Alive),
		agentOf("c", 4, api.Alive),
		agentOf("d", 8, api.Dead, ready(t0.Add(-time.Hour))),
	}
	members[3].Placements[0].State, members[3].Placements[0].Was = api.StateUnavailable, api.StateReady
	var placers []string
	var notes []string
	for _, self := range []string{"a", "b", "c"} {
		k := keeperOf(self)
		k.deadSince["d"] = t0.Add(-12 * time.Second)
		p := k.judge(wants(2), members, t0)
		if p.place {
			placers = append(placers, self)
		}
		assert.Equal(t, 1, p.status.Has)
		assert.Empty(t, p.remove)
		notes = append(notes, p.status.Note)
	}
	assert.Equal(t, []string{"c"}, placers)
	assert.Equal(t, "d dead 12s ago; re-placing on c", notes[0])
	assert.Equal(t, notes[0], notes[1])
	assert.Equal(t, notes[0], notes[2])
	k := keeperOf("a")
	k.deadSince["d"] = t0.Add(-12 * time.Second)
	assert.Equal(t, "qwen wants 2, has 1 (d dead 12s ago; re-placing on c)", api.IntentLine(k.judge(wants(2), members, t0).status))

	members[3].Liveness = api.Suspect
	p := keeperOf("c").judge(wants(2), members, t0)
	assert.Equal(t, 2, p.status.Has, "a suspect host's replica still counts")
	assert.False(t, p.place)
}

// A surplus is removed by the replicas past the count, serving and newest kept first, and only
// while the ones kept serve: never the last.
func TestASurplusRemovesItselfNeverTheLast(t *testing.T) {
	members := []api.Member{
		agentOf("a", 8, api.Alive, ready(t0.Add(-time.Hour))), // came back from the dead: started last
		agentOf("b", 8, api.Alive, ready(t0.Add(-time.Minute))),
		agentOf("c", 8, api.Alive, api.Placement{State: api.StateLoading, CreatedAt: t0}),
	}
	members[0].Host.StartedAt = t0.Add(-time.Second)
	members[1].Host.StartedAt = t0.Add(-time.Hour)
	members[2].Host.StartedAt = t0.Add(-time.Hour)
	removed := func(n int) []string {
		var out []string
		for _, self := range []string{"a", "b", "c"} {
			for _, r := range keeperOf(self).judge(wants(n), members, t0).remove {
				out = append(out, r.Host)
			}
		}
		return out
	}
	assert.Equal(t, []string{"a", "c"}, removed(1), "b serves, on the agent running longest")
	assert.Equal(t, []string{"c"}, removed(2), "a and b serve")
	assert.Empty(t, removed(3))

	members[1].Placements[0].State = api.StateLoading
	assert.Equal(t, []string{"b", "c"}, removed(1), "a serving replica is kept before loading ones")
	members[0].Placements[0].State = api.StateLoading
	assert.Empty(t, removed(1), "none serves yet: nobody goes")
}

// Right after an intent changes, a surplus is left alone for the grace: the view may still show
// a replica deleted by hand on another host just before the model was placed here again.
func TestASurplusJustAfterAChangeWaits(t *testing.T) {
	in := wants(1)
	in.UpdatedAt = t0
	members := []api.Member{
		agentOf("a", 8, api.Alive, ready(t0.Add(-time.Hour))), // deleted there; the view has not heard
		agentOf("b", 8, api.Alive, api.Placement{State: api.StateLoading, CreatedAt: t0}),
	}
	k := keeperOf("b")
	p := k.judge(in, members, t0.Add(time.Second))
	assert.Empty(t, p.remove, "within the grace")
	assert.Contains(t, p.status.Note, "left until the view settles")
	assert.Len(t, k.judge(in, members, t0.Add(k.cfg.Grace)).remove, 1, "a surplus that outlasts the grace goes")

	// While a placement by hand is admitted here (its intent is recorded once it is), none goes.
	k.byHand = 1
	assert.Empty(t, k.judge(in, members, t0.Add(k.cfg.Grace)).remove, "a placement by hand on its way")
}

// A host that failed to place it is left out for its backoff, doubled by each failure in a row,
// and the next best takes it meanwhile; the reason is in the note.
func TestAFailedHostBacksOff(t *testing.T) {
	failed := api.Placement{State: api.StateFailed, Code: api.CodeInsufficientMemory, Reason: "needs 1 GiB, 0 B free", UpdatedAt: t0, Restarts: 2}
	members := []api.Member{agentOf("b", 4, api.Alive, failed), agentOf("c", 8, api.Alive)}
	p := keeperOf("c").judge(wants(1), members, t0.Add(19*time.Second))
	assert.True(t, p.place, "b backs off 5 s × 2² = 20 s")
	assert.Contains(t, p.status.Note, "b failed (needs 1 GiB, 0 B free), retrying there in 1s")
	pb := keeperOf("b").judge(wants(1), members, t0.Add(19*time.Second))
	assert.False(t, pb.place)

	members = members[:1]
	p = keeperOf("b").judge(wants(1), members, t0.Add(19*time.Second))
	assert.False(t, p.place)
	assert.Contains(t, p.status.Note, "no host can take it: b is backing off after a failure")
	p = keeperOf("b").judge(wants(1), members, t0.Add(21*time.Second))
	assert.True(t, p.place, "after its backoff, b tries again")
	require.Len(t, p.clear, 1, "its failed record goes first")
}

// A new intent is left to the agent that took it for a grace; a deleted one, or one edited to
// another source, removes what was placed before the edit; what no host fits says why.
func TestGraceTombstonesAndRefusals(t *testing.T) {
	fresh := wants(1)
	fresh.UpdatedAt = t0.Add(-time.Second)
	members := []api.Member{agentOf("b", 8, api.Alive)}
	p := keeperOf("b").judge(fresh, members, t0)
	assert.False(t, p.place)
	assert.Contains(t, p.status.Note, "new: its own placement is on its way")

	members = []api.Member{agentOf("b", 8, api.Alive, ready(t0.Add(-time.Hour)))}
	gone := wants(1)
	gone.Deleted, gone.UpdatedAt = true, t0
	require.Len(t, keeperOf("b").judge(gone, members, t0).remove, 1)
	edited := wants(1)
	edited.Source, edited.UpdatedAt = "ollama://qwen:7b", t0
	p = keeperOf("b").judge(edited, members, t0.Add(10*time.Second))
	require.Len(t, p.remove, 1)
	assert.Contains(t, p.remove[0].Reason, "superseded")
	assert.True(t, p.place, "and places the new source")

	big := wants(1)
	big.Need = 64 << 30
	p = keeperOf("b").judge(big, []api.Member{agentOf("b", 8, api.Alive)}, t0)
	assert.False(t, p.place)
	assert.Contains(t, p.status.Note, "no host can take it: b refused: needs 64.0 GiB, 8.0 GiB free")
	assert.Equal(t, "no host can take it: b refused: needs 64.0 GiB, 8.0 GiB free", p.blocked, "nothing that passes by itself")
	p = keeperOf("b").judge(big, []api.Member{agentOf("b", 8, api.Alive), agentOf("c", 99, api.Unreachable)}, t0)
	assert.Empty(t, p.blocked, "c, which could, may answer again")
}

// An intent that has fewer replicas than it wants is a doctor's finding, with the reason, in its
// namespace (only its tokens and the admin see it); one met is not.
func TestUnmetIntentsAreFindings(t *testing.T) {
	k := keeperOf("b")
	failed := api.Placement{State: api.StateFailed, Reason: "needs 1 GiB, 0 B free", UpdatedAt: t0}
	short := k.judge(wants(1), []api.Member{agentOf("b", 4, api.Alive, failed)}, t0.Add(time.Second)).status
	met := k.judge(wants(1), []api.Member{agentOf("b", 4, api.Alive, ready(t0))}, t0).status
	met.Name = "other"
	k.status = []api.IntentStatus{short, met}
	fs := k.Findings()
	require.Len(t, fs, 1)
	assert.Equal(t, api.SeverityWarning, fs[0].Severity)
	assert.Equal(t, "intent default/qwen wants 1 replica, has 0", fs[0].Problem)
	assert.Contains(t, fs[0].Fix, "free memory or add a host")
	assert.Equal(t, "default", fs[0].Namespace)
	assert.Contains(t, fs[0].Detail, "b failed (needs 1 GiB, 0 B free), retrying there in 4s")
}

// An intent whose model was swapped off a Hailo-10H by hand, the device its only host, is not
// told to wait for the mesh to re-place it: the keeper never swaps, so the finding says how to
// swap it back or stop keeping it.
func TestSwappedOffIntentFindingSaysWhatToDo(t *testing.T) {
	k := keeperOf("b")
	k.status = []api.IntentStatus{{Intent: wants(1), Has: 0,
		Note: noHost + ": pi5-hailo swap: replaces llama3.2:3b on the Hailo-10H; it answers until the pull ends"}}
	fs := k.Findings()
	require.Len(t, fs, 1)
	assert.Contains(t, fs[0].Fix, "place it again there (console Models: r)")
	assert.NotContains(t, fs[0].Fix, "re-places it")
}

// A replica is placed as its namespace, unless the intent holds what only the admin may ask.
func TestPlacer(t *testing.T) {
	in := wants(1)
	in.Namespace = "team"
	assert.Equal(t, api.Principal{Namespace: "team"}, placer(in))
	in.Source = "file:///models/x.gguf"
	assert.True(t, placer(in).Admin, "a file the admin named, outside the model folders perhaps")
	in = wants(1)
	in.Protected = true
	assert.True(t, placer(in).Admin)
}

// An intent is read back as soon as it is recorded, before the keeper has judged it (a script's
// `mesh alias set` then `mesh models` must list it), and a deletion hides it at once; how it is
// met is the last judgement's.
func TestStatusReadsTheStoreNow(t *testing.T) {
	k := keeperOf("b")
	var err error
	k.cfg.Store, err = intent.Open("", "b")
	require.NoError(t, err)
	judged, _, err := k.cfg.Store.Put(wants(2))
	require.NoError(t, err)
	k.status = []api.IntentStatus{{Intent: judged, Has: 1, Note: "re-placing on c"}}

	fresh := wants(1)
	fresh.Name = "tiny"
	_, _, err = k.cfg.Store.Put(fresh)
	require.NoError(t, err)
	sts := k.Status(api.Principal{Admin: true})
	require.Len(t, sts, 2)
	assert.Equal(t, "qwen", sts[0].Name)
	assert.Equal(t, 1, sts[0].Has)
	assert.Equal(t, "re-placing on c", sts[0].Note)
	assert.Equal(t, "tiny", sts[1].Name, "recorded, not judged yet")
	assert.Zero(t, sts[1].Has)
	assert.Empty(t, k.Status(api.Principal{Namespace: "team"}), "another namespace's intents")

	gone := judged
	gone.Deleted = true
	_, _, err = k.cfg.Store.Put(gone)
	require.NoError(t, err)
	sts = k.Status(api.Principal{Admin: true})
	require.Len(t, sts, 1)
	assert.Equal(t, "tiny", sts[0].Name)
}

// An intent that requires a label goes only to hosts carrying it, whatever else ranks better;
// a replica on a host without it is superseded once the intent asks for the label; and when no
// host carries it, the intent is blocked with the reason.
func TestLabelsConstrainWhereAnIntentRuns(t *testing.T) {
	in := wants(1)
	in.Labels = map[string]string{"gpu": "yes"}
	in.UpdatedAt = t0.Add(-time.Minute)
	members := []api.Member{
		agentOf("a", 4, api.Alive, ready(t0.Add(-time.Hour))), // the tightest fit, unlabelled
		agentOf("b", 8, api.Alive),
		agentOf("c", 8, api.Alive),
	}
	members[2].Host.Labels = map[string]string{"gpu": "yes", "room": "attic"}
	for _, self := range []string{"a", "b", "c"} {
		p := keeperOf(self).judge(in, members, t0)
		assert.Equal(t, self == "c", p.place, self)
		assert.Equal(t, 0, p.status.Has, "a's replica does not count: a has no gpu=yes")
		if self == "a" {
			require.Len(t, p.remove, 1, "a's replica made before the intent asked for the label goes")
			assert.Contains(t, p.remove[0].Reason, "superseded")
		} else {
			assert.Empty(t, p.remove)
		}
	}

	members[2].Host.Labels = map[string]string{"gpu": "no"}
	p := keeperOf("b").judge(in, members, t0)
	assert.False(t, p.place)
	assert.Contains(t, p.blocked, "no label gpu=yes")
}

// Under load an intent with room to scale adds one replica at a time, where the ranking says,
// once a replica has been busy for ScaleAfter and every replica serves; the added replica goes
// again once idle for the intent's TTL, never below Replicas.
func TestABusyIntentAddsAReplicaAndDropsItWhenIdle(t *testing.T) {
	in := wants(1)
	in.MaxReplicas, in.TTL = 3, "10m"
	busy := ready(t0.Add(-time.Hour))
	busy.LastUsed = t0
	busy.BusySince = t0.Add(-10 * time.Second)
	members := []api.Member{agentOf("a", 8, api.Alive, busy), agentOf("b", 8, api.Alive), agentOf("c", 4, api.Alive)}
	k := func(self string) *Keeper { k := keeperOf(self); k.cfg.ScaleAfter = 30 * time.Second; return k }

	p := k("c").judge(in, members, t0)
	assert.False(t, p.place, "busy for 10 s only")
	var placers []string
	for _, self := range []string{"a", "b", "c"} {
		p := k(self).judge(in, members, t0.Add(25*time.Second))
		if p.place {
			placers = append(placers, self)
		}
		assert.Contains(t, p.status.Note, "busy: adding a replica (at most 3)")
	}
	assert.Equal(t, []string{"c"}, placers, "one, the best-ranked host")

	// c's replica is loading: no third yet, however busy a stays.
	loading := api.Placement{State: api.StateLoading, CreatedAt: t0.Add(30 * time.Second)}
	members[2] = agentOf("c", 4, api.Alive, loading)
	p = k("b").judge(in, members, t0.Add(time.Minute))
	assert.False(t, p.place)
	assert.Empty(t, p.remove)
	// Once it serves and a is still busy, the third.
	members[2].Placements[0].State = api.StateReady
	p = k("b").judge(in, members, t0.Add(time.Minute))
	assert.True(t, p.place)

	// The load ends: both in use within the TTL stay; c's, unused past the TTL, goes; a's stays.
	members[0].Placements[0].BusySince = time.Time{}
	members[0].Placements[0].LastUsed = t0.Add(5 * time.Minute)
	members[2].Placements[0].LastUsed = t0.Add(2 * time.Minute)
	p = k("c").judge(in, members, t0.Add(6*time.Minute))
	assert.Empty(t, p.remove)
	assert.False(t, p.place)
	p = k("c").judge(in, members, t0.Add(13*time.Minute))
	require.Len(t, p.remove, 1)
	assert.Equal(t, "p-c", p.remove[0].ID)
	assert.Empty(t, k("a").judge(in, members, t0.Add(time.Hour)).remove, "never below its replicas")

	// Without room to scale, busy changes nothing.
	in.MaxReplicas = 0
	members[0].Placements[0].BusySince = t0.Add(-time.Hour)
	p = k("b").judge(in, members[:2], t0)
	assert.False(t, p.place)
}

// How intents are met is announced by one agent, the first alive by name, so the console's
// events (every agent's, merged) say each change once.
func TestOneAgentAnnounces(t *testing.T) {
	members := []api.Member{agentOf("a", 8, api.Alive), agentOf("b", 8, api.Alive), agentOf("c", 8, api.Alive)}
	assert.True(t, keeperOf("a").speaks(members))
	assert.False(t, keeperOf("b").speaks(members))
	members[0].Liveness = api.Dead
	assert.True(t, keeperOf("b").speaks(members), "a is dead: b speaks")
	assert.False(t, keeperOf("c").speaks(members))
}

// An intent kept off battery goes to a host not on battery, whatever ranks better; a replica
// already running on a host that went on battery keeps running and counts; when every host is
// on battery nothing is placed, and the intent is not blocked: a host plugged in takes it.
func TestNotOnBatteryConstrainsNewReplicasOnly(t *testing.T) {
	in := wants(1)
	in.NotOnBattery = true
	in.UpdatedAt = t0.Add(-time.Minute)
	members := []api.Member{
		agentOf("a", 4, api.Alive), // the tightest fit, on battery
		agentOf("b", 8, api.Alive),
	}
	members[0].Host.OnBattery = true
	for _, self := range []string{"a", "b"} {
		p := keeperOf(self).judge(in, members, t0)
		assert.Equal(t, self == "b", p.place, self)
		assert.Contains(t, p.status.Note, "re-placing on b")
	}

	running := []api.Member{agentOf("a", 4, api.Alive, ready(t0.Add(-time.Hour))), agentOf("b", 8, api.Alive)}
	running[0].Host.OnBattery = true
	for _, self := range []string{"a", "b"} {
		p := keeperOf(self).judge(in, running, t0)
		assert.False(t, p.place, self)
		assert.Empty(t, p.remove, "a replica on a host gone on battery keeps running")
		assert.Equal(t, 1, p.status.Has)
	}

	members[1].Host.OnBattery = true
	p := keeperOf("b").judge(in, members, t0)
	assert.False(t, p.place)
	assert.Empty(t, p.blocked, "on battery passes: not blocked")
	assert.Contains(t, p.status.Note, "refused: on battery")
}
