package mesh

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

func sampleDoc(node string, gen uint64, nPlacements int) *stateDoc {
	d := &stateDoc{V: docVersion, Node: node, Gen: gen, At: time.Unix(1700000000, 0).UTC(),
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

func mustEncode(t testing.TB, d *stateDoc) []byte {
	w, err := encodeDoc(d)
	require.NoError(t, err)
	return w
}

func TestDocRoundTrip(t *testing.T) {
	d := sampleDoc("pi", 12345, 2)
	w := mustEncode(t, d)
	got, err := decodeDoc(w)
	require.NoError(t, err)
	require.Equal(t, d, got)
	t.Logf("a document with 2 placements: %d bytes encoded", len(w))
}

func TestDocIgnoresUnknownFieldsAndRefusesBadOnes(t *testing.T) {
	enc := func(js string) []byte {
		var buf bytes.Buffer
		buf.WriteByte(docWire)
		fw, _ := flate.NewWriter(&buf, flate.BestSpeed)
		fw.Write([]byte(js))
		fw.Close()
		return buf.Bytes()
	}
	d, err := decodeDoc(enc(`{"v":1,"node":"a","gen":3,"from_the_future":{"x":1}}`))
	require.NoError(t, err)
	require.Equal(t, uint64(3), d.Gen)

	for js, want := range map[string]string{
		`{"v":2,"node":"a","gen":3}`: "version 2",
		`{"node":"a","gen":3}`:       "no version",
		`{"v":1,"gen":3}`:            "no node",
		`not json`:                   "invalid character",
	} {
		_, err := decodeDoc(enc(js))
		require.ErrorContains(t, err, want, js)
	}
	_, err = decodeDoc([]byte{9, 1, 2})
	require.ErrorContains(t, err, "unknown encoding")
	_, err = decodeDoc(nil)
	require.Error(t, err)

	// A small message that inflates past the limit is refused, not swallowed whole.
	bomb := enc(`{"v":1,"node":"a","pad":"` + strings.Repeat("A", maxDocBytes+10) + `"}`)
	require.Less(t, len(bomb), 64<<10)
	_, err = decodeDoc(bomb)
	require.ErrorContains(t, err, "over")
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
			dd, err := decodeDoc(w)
			require.NoError(t, err)
			e := docEntry{doc: dd, wire: w, hash: docHash(w)}
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

// FuzzDecodeDoc: any bytes decode or fail cleanly; what decodes re-encodes to the same doc.
func FuzzDecodeDoc(f *testing.F) {
	f.Add(mustEncode(f, sampleDoc("pi", 1, 0)))
	f.Add(mustEncode(f, sampleDoc("pi", 1<<60, 3)))
	f.Add([]byte{docWire})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeDoc(b)
		if err != nil {
			return
		}
		require.NotEmpty(t, d.Node)
		if h := d.Host; h != nil {
			for _, v := range []int64{h.Memory.Total, h.Memory.Budget, h.Memory.Committed, h.Memory.Reserved, h.Memory.Available} {
				require.True(t, v >= 0 && v <= maxBytes, v)
			}
			require.Equal(t, api.Printable(h.Chip), h.Chip)
		}
		for _, p := range d.Placements {
			require.Equal(t, api.Printable(p.Model), p.Model)
			require.True(t, p.Progress >= 0 && p.Progress <= 1)
		}
		w, err := encodeDoc(d)
		require.NoError(t, err)
		d2, err := decodeDoc(w)
		require.NoError(t, err)
		j1, _ := json.Marshal(d)
		j2, _ := json.Marshal(d2)
		require.JSONEq(t, string(j1), string(j2))
	})
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
					decodeDoc(w)
				}
				again, err := decodeState(encodeState(st))
				require.NoError(t, err)
				require.Equal(t, len(st.docs), len(again.docs))
				require.Equal(t, st.leaves, again.leaves)
			}
		}
	})
}

// BenchmarkDocCodec encodes and decodes one document with four placements, as an agent does on
// every change of its state that matters (SetLocal) and a member on every document it learns.
func BenchmarkDocCodec(b *testing.B) {
	d := sampleDoc("pi", 12345, 4)
	b.ReportAllocs()
	for b.Loop() {
		w, err := encodeDoc(d)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := decodeDoc(w); err != nil {
			b.Fatal(err)
		}
	}
}
