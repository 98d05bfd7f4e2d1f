package mesh

import (
	"bytes"
	"encoding/binary"
	"math"
	"strings"
	"testing"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/require"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/seal"
	"github.com/llmkube/mesh/mesh/statedoc"
)

// worstHost reaches every cap of the metadata: the longest chip, every accelerator kind (and
// more devices than fit), every runtime, the longest API address, the largest numbers.
func worstHost() (*api.Host, []api.Placement) {
	h := &api.Host{
		OS: strings.Repeat("o", 40), Arch: strings.Repeat("a", 40),
		Chip:    "Apple M4 Max (16-core CPU, 40-core GPU) with a really long marketing name",
		CPUs:    math.MaxInt32,
		Memory:  api.Memory{Total: math.MaxInt64, Budget: math.MaxInt64, Committed: math.MaxInt64, Reserved: math.MaxInt64, Available: math.MaxInt64},
		APIAddr: strings.Repeat("h", maxMetaAPIAddr-6) + ":65535",
		Version: strings.Repeat("9", 40),
	}
	for i := range 8 {
		h.Accelerators = append(h.Accelerators, api.Accelerator{
			Kind:   strings.Repeat("k", 30),
			Name:   strings.Repeat("n", 60) + string(rune('a'+i)), // all distinct
			Memory: math.MaxInt64 - int64(i),
			Loaded: strings.Repeat("m", 200),
		})
	}
	for _, r := range api.Runtimes {
		h.Engines = append(h.Engines, api.Engine{Runtime: r, Present: true, Healthy: true})
	}
	ps := make([]api.Placement, 5000)
	for i := range ps {
		ps[i].State = api.StateReady
	}
	return h, ps
}

func TestMetaWorstCaseFits(t *testing.T) {
	h, ps := worstHost()
	worst := metaFromHost(h, ps, math.MaxUint64, true)
	worst.Seq = math.MaxUint64
	worst.DocHash = strings.Repeat("h", statedoc.HashSize)
	worst.SealKey = bytes.Repeat([]byte{0xff}, seal.KeyIDSize)
	b, err := encodeMeta(worst)
	require.NoError(t, err)
	require.LessOrEqual(t, len(b), memberlist.MetaMaxSize)
	t.Logf("worst-case node metadata: %d of %d bytes", len(b), memberlist.MetaMaxSize)

	m, err := decodeMeta(b)
	require.NoError(t, err)
	clamped := api.Memory{Total: statedoc.MaxBytes, Available: statedoc.MaxBytes, Budget: statedoc.MaxBytes, Committed: statedoc.MaxBytes, Reserved: statedoc.MaxBytes}
	require.Equal(t, clamped, m.Memory, "figures past statedoc.MaxBytes are clamped")
	require.Len(t, m.Accels, maxMetaAccels)
	require.Equal(t, h.APIAddr, m.APIAddr)
	require.Equal(t, uint64(math.MaxUint64), m.Gen)
	require.Equal(t, worst.DocHash, m.DocHash)
	require.Equal(t, worst.SealKey, m.SealKey)
	require.Equal(t, 5000, m.Ready)
}

func TestMetaRefusesAnAPIAddressTooLong(t *testing.T) {
	_, err := encodeMeta(nodeMeta{Role: api.RoleAgent, APIAddr: strings.Repeat("h", maxMetaAPIAddr) + ":1"})
	require.ErrorContains(t, err, "advertise an IP address")
}

func TestMetaRoundTrip(t *testing.T) {
	h := &api.Host{
		OS: "linux", Arch: "arm64", Chip: "BCM2712", CPUs: 4, APIAddr: "10.0.0.7:7777", Version: "1.0",
		Memory: api.Memory{Total: 8 << 30, Budget: 5 << 30, Committed: 1 << 30, Reserved: 512 << 20, Available: 6 << 30},
		Accelerators: []api.Accelerator{
			{Kind: "hailo", Name: "Hailo-10H", Memory: 8 << 30, Loaded: "qwen2:1.5b"},
			{Kind: "nvidia", Name: "RTX 3090", Memory: 24 << 30},
			{Kind: "nvidia", Name: "RTX 3090", Memory: 24 << 30},
		},
		Engines: []api.Engine{{Runtime: api.RuntimeHailoOllama, Present: true, Healthy: true}, {Runtime: api.RuntimeOllama, Present: true}},
	}
	ps := []api.Placement{{State: api.StateReady}, {State: api.StatePulling}}
	b, err := encodeMeta(metaFromHost(h, ps, 42, false))
	require.NoError(t, err)
	m, err := decodeMeta(b)
	require.NoError(t, err)
	require.Equal(t, api.RoleAgent, m.Role)
	require.Equal(t, 2, m.Placements)
	require.Equal(t, 1, m.Ready)
	require.Equal(t, uint64(42), m.Gen)
	require.Zero(t, m.Flags&flagDocGossiped)

	got := m.host("pi")
	require.Equal(t, "pi", got.Name)
	require.Equal(t, h.Memory, got.Memory)
	require.Equal(t, h.APIAddr, got.APIAddr)
	require.Len(t, got.Accelerators, 3, "two identical GPUs travel as one group with a count")
	require.Equal(t, []api.Engine{
		{Runtime: api.RuntimeOllama, Present: true},
		{Runtime: api.RuntimeHailoOllama, Present: true, Healthy: true},
	}, got.Engines)

	cb, err := encodeMeta(nodeMeta{Role: api.RoleConsole, Seq: 99})
	require.NoError(t, err)
	cm, err := decodeMeta(cb)
	require.NoError(t, err)
	require.Equal(t, api.RoleConsole, cm.Role)
	require.Equal(t, uint64(99), cm.Seq)
}

func TestMetaSkipsUnknownFieldsAndRefusesUnknownVersions(t *testing.T) {
	b, err := encodeMeta(nodeMeta{Role: api.RoleAgent, APIAddr: "10.0.0.1:1", Gen: 7})
	require.NoError(t, err)
	// A newer member adds field 200 in the middle.
	newer := append([]byte{}, b[:4]...)
	newer = appendField(newer, 200, []byte("something new"))
	newer = append(newer, b[4:]...)
	m, err := decodeMeta(newer)
	require.NoError(t, err)
	require.Equal(t, "10.0.0.1:1", m.APIAddr)
	require.Equal(t, uint64(7), m.Gen)

	other := append([]byte{}, b...)
	other[0] = metaVersion + 1
	_, err = decodeMeta(other)
	require.ErrorIs(t, err, errMetaVersion)

	for _, bad := range [][]byte{nil, {metaVersion}, b[:len(b)-1], {metaVersion, tagRole, 5, 0}, {metaVersion, tagRole, 1, 9}} {
		_, err := decodeMeta(bad)
		require.Error(t, err, "%x", bad)
	}
	huge := binary.AppendUvarint([]byte{metaVersion, tagRole}, math.MaxUint64)
	_, err = decodeMeta(huge)
	require.Error(t, err)
}

func TestTruncateKeepsRunesWhole(t *testing.T) {
	require.Equal(t, "ab", truncate("abc", 2))
	require.Equal(t, "é", truncate("éé", 3))
	require.Equal(t, "", truncate("é", 1))
}

// FuzzDecodeMeta: any bytes decode or fail cleanly; what decodes survives a re-encoding.
func FuzzDecodeMeta(f *testing.F) {
	h, ps := worstHost()
	wm := metaFromHost(h, ps, 1, true)
	wm.Seq = 1 << 60
	worst, _ := encodeMeta(wm)
	console, _ := encodeMeta(nodeMeta{Role: api.RoleConsole, Seq: 5})
	f.Add(worst)
	f.Add(console)
	f.Add([]byte{metaVersion, tagRole, 1, 0, 200, 3, 1, 2, 3})
	f.Add([]byte{metaVersion, tagAccel, 4, 1, 'a', 1, 'b'})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		// Whatever a member sends, what reaches a console is printable and summable.
		for _, str := range []string{m.APIAddr, m.OS, m.Arch, m.Chip, m.AgentVersion} {
			require.Equal(t, api.Printable(str), str)
		}
		for _, v := range []int64{m.Memory.Total, m.Memory.Budget, m.Memory.Committed, m.Memory.Reserved, m.Memory.Available} {
			require.True(t, v >= 0 && v <= statedoc.MaxBytes, v)
		}
		require.True(t, m.CPUs <= statedoc.MaxCount && m.Placements <= statedoc.MaxCount && m.Ready <= statedoc.MaxCount)
		again, err := encodeMeta(m)
		if err != nil {
			return // e.g. an API address longer than this build sends
		}
		require.LessOrEqual(t, len(again), memberlist.MetaMaxSize)
		m2, err := decodeMeta(again)
		require.NoError(t, err)
		if m.Role == api.RoleAgent {
			m.Accels, m2.Accels = nil, nil // strings inside are truncated on re-encoding
			m.OS, m.Arch, m.Chip, m.AgentVersion = truncate(m.OS, maxMetaOS), truncate(m.Arch, maxMetaArch), truncate(m.Chip, maxMetaChip), truncate(m.AgentVersion, maxMetaVersion)
			require.Equal(t, m, m2)
		}
	})
}
