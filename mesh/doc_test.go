package mesh

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/mesh/statedoc"
)

func sampleDoc(node string, gen uint64, nPlacements int) *statedoc.Doc {
	d := &statedoc.Doc{V: statedoc.Version, Node: node, Gen: gen, At: time.Unix(1700000000, 0).UTC(),
		Host: &api.Host{Name: node, OS: "linux", Arch: "arm64", APIAddr: "10.0.0.7:7777",
			Memory: api.Memory{Total: 8 << 30, Budget: 5 << 30, Committed: int64(gen)}}}
	for i := range nPlacements {
		d.Placements = append(d.Placements, api.Placement{
			ID: fmt.Sprintf("p%d", i), Host: node, Model: fmt.Sprintf("model-%d", i), Source: "ollama://qwen2:1.5b",
			Runtime: api.RuntimeOllama, Namespace: "default", Context: 2048, Priority: api.PriorityNormal,
			State: api.StateReady, Memory: api.SizeEstimate{Bytes: 1 << 30, Method: api.SizeRegistry}, TokensPerS: 12.5,
		})
	}
	return d
}

func mustEncode(t testing.TB, d *statedoc.Doc) []byte {
	w, err := statedoc.Encode(d)
	require.NoError(t, err)
	return w
}

// TestOnlyTheNamedDocumentIsKept: whatever documents about a node arrive, in whatever order and
// however often — older ones, newer ones, ones with the largest generation — a member keeps the
// one the node's metadata names, and one that arrived early is kept as soon as it is named.
func TestOnlyTheNamedDocumentIsKept(t *testing.T) {
	x := newCluster(t).add("x", api.RoleConsole)
	rng := rand.New(rand.NewPCG(1, 2))
	var all []docEntry
	named := map[string]docEntry{}
	for _, n := range []string{"a", "b", "c"} {
		for _, gen := range []uint64{1, 2, 2, 5, math.MaxUint64} {
			d := sampleDoc(n, gen, 1)
			d.Placements[0].Model = fmt.Sprintf("m%d", rng.IntN(1000))
			w := mustEncode(t, d)
			dd, err := statedoc.Decode(w)
			require.NoError(t, err)
			e := docEntry{doc: dd, wire: w, hash: statedoc.Hash(w)}
			all = append(all, e)
			if gen == 2 {
				named[n] = e // the node published this one, whatever else travels
			}
		}
	}
	setMeta := func(n, hash string) {
		b, err := encodeMeta(nodeMeta{Role: api.RoleAgent, APIAddr: n + ".test:1", DocHash: hash})
		require.NoError(t, err)
		x.mu.Lock()
		defer x.mu.Unlock()
		mb := x.members[n]
		if mb == nil {
			mb = &member{name: n, state: api.Alive}
			x.members[n] = mb
		}
		x.updateMetaLocked(mb, b)
	}
	hashes := func() map[string]string {
		x.mu.Lock()
		defer x.mu.Unlock()
		out := map[string]string{}
		for n := range named {
			out[n] = x.docs[n].hash
		}
		return out
	}
	for n, e := range named {
		setMeta(n, e.hash)
	}
	want := map[string]string{}
	for n, e := range named {
		want[n] = e.hash
	}
	for range 50 {
		for _, i := range rng.Perm(len(all)) {
			x.acceptDoc(all[i].doc, all[i].wire)
			if rng.IntN(3) == 0 {
				x.acceptDoc(all[i].doc, all[i].wire) // again: idempotent
			}
		}
		require.Equal(t, want, hashes())
	}
	// The node's next document arrives before the metadata naming it, and is kept once named.
	for _, e := range all {
		if e.doc.Node == "a" && e.doc.Gen == 5 {
			x.acceptDoc(e.doc, e.wire)
			require.Equal(t, want, hashes(), "not named yet: set aside")
			setMeta("a", e.hash)
			want["a"] = e.hash
		}
	}
	require.Equal(t, want, hashes())
}

func TestMessagesRoundTrip(t *testing.T) {
	n := liveNotice{Kind: liveSuspect, Seq: 99, Node: "pi-1", From: "mac-2"}
	b := encodeLive(n)
	require.Equal(t, byte(msgLive), b[0])
	got, err := decodeLive(b[1:])
	require.NoError(t, err)
	require.Equal(t, n, got)

	r := encodeDocRequest("pi-1", "mac-2")
	node, from, err := decodeDocRequest(r[1:])
	require.NoError(t, err)
	require.Equal(t, "pi-1", node)
	require.Equal(t, "mac-2", from)

	w1, w2 := mustEncode(t, sampleDoc("a", 1, 1)), mustEncode(t, sampleDoc("b", 2, 0))
	leave := liveNotice{Kind: liveLeave, Seq: 7, Node: "c", From: "a"}
	st, err := decodeState(encodeState(pushState{docs: [][]byte{w1, w2}, leaves: []liveNotice{leave}}))
	require.NoError(t, err)
	require.Equal(t, [][]byte{w1, w2}, st.docs)
	require.Equal(t, []liveNotice{leave}, st.leaves)
	st, err = decodeState(encodeState(pushState{docs: [][]byte{w1}}))
	require.NoError(t, err)
	require.Equal(t, [][]byte{w1}, st.docs)
	require.Empty(t, st.leaves)
	st, err = decodeState(nil)
	require.NoError(t, err)
	require.Empty(t, st.docs)
	_, err = decodeState([]byte{stateWire, 0xff, 0xff, 0xff, 0xff, 0x0f})
	require.ErrorContains(t, err, "at most")
	_, err = decodeState([]byte{stateWire, 2, 3, 'a'})
	require.Error(t, err)
	_, err = decodeState([]byte{stateWire, 0, 1, 2, 9, 9})
	require.Error(t, err, "a malformed notice")
}

// FuzzDecodeMessage: liveness notices, document requests and push/pull states never panic.
func FuzzDecodeMessage(f *testing.F) {
	f.Add(encodeLive(liveNotice{Kind: liveLeave, Seq: 1, Node: "a", From: "a"}))
	f.Add(encodeDocRequest("a", "b"))
	f.Add(append([]byte{0}, encodeState(pushState{docs: [][]byte{mustEncode(f, sampleDoc("a", 1, 1))}, leaves: []liveNotice{{Kind: liveLeave, Seq: 1, Node: "b", From: "a"}}})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) == 0 {
			return
		}
		switch b[0] {
		case msgLive:
			if n, err := decodeLive(b[1:]); err == nil {
				again, err := decodeLive(encodeLive(n)[1:])
				require.NoError(t, err)
				require.Equal(t, n, again)
			}
		case msgDocRequest:
			if node, from, err := decodeDocRequest(b[1:]); err == nil {
				require.NotEmpty(t, node)
				require.NotEmpty(t, from)
			}
		default:
			if st, err := decodeState(b[1:]); err == nil {
				for _, w := range st.docs {
					statedoc.Decode(w)
				}
				again, err := decodeState(encodeState(st))
				require.NoError(t, err)
				require.Equal(t, len(st.docs), len(again.docs))
				require.Equal(t, st.leaves, again.leaves)
			}
		}
	})
}
