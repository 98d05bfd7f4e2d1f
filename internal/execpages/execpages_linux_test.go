package execpages

import (
	"encoding/json"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// resident is what Release would drop from this process now, in bytes.
func resident(t *testing.T) int64 {
	t.Helper()
	var exe unix.Stat_t
	require.NoError(t, unix.Stat("/proc/self/exe", &exe))
	b, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	maps, err := parseSmaps(b)
	require.NoError(t, err)
	var n int64
	for _, m := range releasable(maps, exe) {
		n += m.rss
	}
	return n
}

// written lives in the binary's writable data: Release must leave what the program wrote there.
var written = [64 << 10]byte{1: 1}

func TestReleaseDropsCodePagesAndTheProgramRunsOn(t *testing.T) {
	for i := range written {
		written[i] = byte(i * 7)
	}
	// The first release reads the mappings; the one measured here uses what it remembered.
	_, err := Release()
	require.NoError(t, err)
	// Run code from a few packages so that their pages are resident before.
	_, err = json.Marshal(map[string]any{"a": []int{1, 2}})
	require.NoError(t, err)
	before := resident(t)
	require.Positive(t, before, "a running test binary has resident code")

	fileBefore, err := fileResident()
	require.NoError(t, err)
	got, err := Release()
	require.NoError(t, err)
	fileAfter, err := fileResident()
	require.NoError(t, err)
	assert.Less(t, fileAfter, fileBefore-got/2, "the pages are no longer mapped: only those run since are back")
	// Net of what came back in between the drop and the count (the pages of the code that ran
	// then, each with its neighbours), so less than all, but most.
	assert.Greater(t, got, before/2, "it reports what it dropped")
	assert.LessOrEqual(t, got, fileBefore, "no more than was resident")
	t.Logf("resident code and read-only data: %d kB before, %d kB released; file-backed %d kB before, %d kB after",
		before>>10, got>>10, fileBefore>>10, fileAfter>>10)

	// The code faults back in from the file: the program runs on, and its data is intact.
	out, err := json.Marshal(map[string]any{"model": "tiny", "n": 3})
	require.NoError(t, err)
	assert.JSONEq(t, `{"model":"tiny","n":3}`, string(out))
	assert.Equal(t, "x=42", fmt.Sprintf("x=%d", 42))
	for i := range written {
		if written[i] != byte(i*7) {
			t.Fatalf("written[%d] = %d after Release, want %d", i, written[i], byte(i*7))
		}
	}
	again, err := Release()
	require.NoError(t, err)
	assert.Positive(t, again, "what ran since is resident again, and released again")
}

func TestReleasableLeavesWhatTheFileCannotGiveBack(t *testing.T) {
	const smaps = `00400000-00c00000 r-xp 00000000 fd:01 777 /usr/local/bin/llmkube-agent
Size:               8192 kB
Rss:                6000 kB
Anonymous:             0 kB
VmFlags: rd ex mr mw me
00c00000-01400000 r--p 00800000 fd:01 777 /usr/local/bin/llmkube-agent
Rss:                5000 kB
Anonymous:             0 kB
01400000-01410000 r--p 01000000 fd:01 777 /usr/local/bin/llmkube-agent
Rss:                  64 kB
Anonymous:            64 kB
01410000-01450000 rw-p 01010000 fd:01 777 /usr/local/bin/llmkube-agent
Rss:                 256 kB
Anonymous:           128 kB
01450000-01460000 r--p 00000000 fd:01 778 /usr/lib/other.so
Rss:                  64 kB
Anonymous:             0 kB
01460000-01470000 r--s 00000000 fd:01 777 /usr/local/bin/llmkube-agent
Rss:                  64 kB
Anonymous:             0 kB
01470000-01480000 r--p 00000000 fd:01 777 /usr/local/bin/llmkube-agent
Rss:                   0 kB
Anonymous:             0 kB
c000000000-c004000000 rw-p 00000000 00:00 0
Rss:                2048 kB
Anonymous:          2048 kB
`
	maps, err := parseSmaps([]byte(smaps))
	require.NoError(t, err)
	require.Len(t, maps, 8)
	got := releasable(maps, unix.Stat_t{Ino: 777, Dev: unix.Mkdev(0xfd, 1)})
	require.Len(t, got, 3, "the code, the read-only data and a read-only mapping with nothing resident yet; "+
		"not the relocated data (pages of its own), the writable data, another file, a shared mapping, or the heap")
	assert.Equal(t, uintptr(0x400000), got[0].start)
	assert.Equal(t, int64(6000<<10), got[0].rss)
	assert.Equal(t, uintptr(0xc00000), got[1].start)
	assert.Equal(t, uintptr(0x1470000), got[2].start)
	assert.Empty(t, releasable(maps, unix.Stat_t{Ino: 777, Dev: unix.Mkdev(0xfd, 2)}), "same inode, another device")
}

func TestParseSmapsRefusesWhatItCannotRead(t *testing.T) {
	for _, bad := range []string{
		"Rss: 4 kB\n", // a field before any mapping
		"00400000-00c00000 r-xp 00000000 fd:01\n",                    // no inode
		"00c00000-00400000 r-xp 00000000 fd:01 7 /x\n",               // end before start
		"zz-00c00000 r-xp 00000000 fd:01 7 /x\n",                     // not hexadecimal
		"00400000-00c00000 r-xp 00000000 fd:01 7 /x\nRss: many kB\n", // not a number
	} {
		_, err := parseSmaps([]byte(bad))
		assert.Error(t, err, "%q", bad)
	}
}
