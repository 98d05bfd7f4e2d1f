package statedoc

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
)

// sample is a document of node with nPlacements placements, every kind of field filled in, so
// that a round trip covers them.
func sample(node string, gen uint64, nPlacements int) *Doc {
	h := &api.Host{Name: node, OS: "linux", Arch: "arm64", Chip: "BCM2712", CPUs: 4, APIAddr: "10.0.0.7:7777",
		Memory:       api.Memory{Total: 8 << 30, Budget: 5 << 30, Committed: int64(gen), Available: 6 << 30},
		Accelerators: []api.Accelerator{{Kind: "hailo", Name: "Hailo-10H", Memory: 8 << 30}},
		Engines:      []api.Engine{{Runtime: api.RuntimeOllama, Present: true, Healthy: true}},
	}
	d := &Doc{V: Version, Node: node, Gen: gen, At: time.Unix(1700000000, 0).UTC(), Host: h}
	for i := range nPlacements {
		p := api.Placement{ID: fmt.Sprintf("p%d", i), Host: node, Model: fmt.Sprintf("model-%d", i),
			Source: "ollama://qwen2:1.5b", Runtime: api.RuntimeOllama, Namespace: "default", Context: 2048,
			State: api.StateReady, Memory: api.SizeEstimate{Bytes: 1 << 30, Method: api.SizeRegistry}}
		p.Priority, p.TokensPerS, p.TTFTMillis, p.Progress = api.PriorityNormal, 12.5, 80, 1
		d.Placements = append(d.Placements, p)
	}
	return d
}

func mustEncode(t testing.TB, d *Doc) []byte {
	w, err := Encode(d)
	require.NoError(t, err)
	return w
}

func TestDocRoundTrip(t *testing.T) {
	d := sample("pi", 12345, 2)
	w := mustEncode(t, d)
	got, err := Decode(w)
	require.NoError(t, err)
	require.Equal(t, d, got)
	t.Logf("a document with 2 placements: %d bytes encoded", len(w))
}

func TestDocIgnoresUnknownFieldsAndRefusesBadOnes(t *testing.T) {
	enc := func(js string) []byte {
		var buf bytes.Buffer
		buf.WriteByte(wire)
		fw, _ := flate.NewWriter(&buf, flate.BestSpeed)
		fw.Write([]byte(js))
		fw.Close()
		return buf.Bytes()
	}
	d, err := Decode(enc(`{"v":1,"node":"a","gen":3,"from_the_future":{"x":1}}`))
	require.NoError(t, err)
	require.Equal(t, uint64(3), d.Gen)

	for js, want := range map[string]string{
		`{"v":2,"node":"a","gen":3}`: "version 2",
		`{"node":"a","gen":3}`:       "no version",
		`{"v":1,"gen":3}`:            "no node",
		`not json`:                   "invalid character",
	} {
		_, err := Decode(enc(js))
		require.ErrorContains(t, err, want, js)
	}
	_, err = Decode([]byte{9, 1, 2})
	require.ErrorContains(t, err, "unknown encoding")
	_, err = Decode(nil)
	require.Error(t, err)

	// A small message that inflates past the limit is refused, not swallowed whole.
	bomb := enc(`{"v":1,"node":"a","pad":"` + strings.Repeat("A", maxSize+10) + `"}`)
	require.Less(t, len(bomb), 64<<10)
	_, err = Decode(bomb)
	require.ErrorContains(t, err, "over")
}

// FuzzDecodeDoc: any bytes decode or fail cleanly; what decodes re-encodes to the same doc.
func FuzzDecodeDoc(f *testing.F) {
	f.Add(mustEncode(f, sample("pi", 1, 0)))
	f.Add(mustEncode(f, sample("pi", 1<<60, 3)))
	f.Add([]byte{wire})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := Decode(b)
		if err != nil {
			return
		}
		require.NotEmpty(t, d.Node)
		if h := d.Host; h != nil {
			for _, v := range []int64{h.Memory.Total, h.Memory.Budget, h.Memory.Committed, h.Memory.Reserved, h.Memory.Available} {
				require.True(t, v >= 0 && v <= MaxBytes, v)
			}
			require.Equal(t, api.Printable(h.Chip), h.Chip)
		}
		for _, p := range d.Placements {
			require.Equal(t, api.Printable(p.Model), p.Model)
			require.True(t, p.Progress >= 0 && p.Progress <= 1)
		}
		w, err := Encode(d)
		require.NoError(t, err)
		d2, err := Decode(w)
		require.NoError(t, err)
		j1, _ := json.Marshal(d)
		j2, _ := json.Marshal(d2)
		require.JSONEq(t, string(j1), string(j2))
	})
}

// BenchmarkDocCodec encodes and decodes one document with four placements, as an agent does on
// every change of its state that matters (SetLocal) and a member on every document it learns.
func BenchmarkDocCodec(b *testing.B) {
	d := sample("pi", 12345, 4)
	b.ReportAllocs()
	for b.Loop() {
		w, err := Encode(d)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Decode(w); err != nil {
			b.Fatal(err)
		}
	}
}
