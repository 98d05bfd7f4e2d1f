package discovery

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLastKnownRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.json")

	got, err := LoadLastKnown(path)
	require.NoError(t, err, "a missing file is a first start, not an error")
	assert.Nil(t, got)

	want := []string{"10.0.0.7:7946", "[fe80::1%eth0]:7946", "pi-kitchen.local:7946"}
	require.NoError(t, SaveLastKnown(path, want))
	got, err = LoadLastKnown(path)
	require.NoError(t, err)
	assert.Equal(t, want, got)

	st, err := os.Stat(path)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// Saving again replaces the list and leaves no temp files behind.
	require.NoError(t, SaveLastKnown(path, nil))
	got, err = LoadLastKnown(path)
	require.NoError(t, err)
	assert.Empty(t, got)
	entries, err := os.ReadDir(filepath.Dir(path))
	require.NoError(t, err)
	assert.Len(t, entries, 1)
}

func TestSaveLastKnownRefusesBadAddressAndKeepsOldFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "peers.json")
	require.NoError(t, SaveLastKnown(path, []string{"10.0.0.7:7946"}))
	err := SaveLastKnown(path, []string{"10.0.0.8"})
	require.ErrorContains(t, err, "want host:port")
	got, err := LoadLastKnown(path)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.0.0.7:7946"}, got)
}

func TestLoadLastKnownGarbage(t *testing.T) {
	cases := map[string]struct{ body, err string }{
		"not json":       {"hello", "not a last-known peers file"},
		"empty":          {"", "not a last-known peers file"},
		"wrong version":  {`{"version":2,"peers":[]}`, "version 2"},
		"no version":     {`{"peers":["10.0.0.1:1"]}`, "version 0"},
		"bad address":    {`{"version":1,"peers":["10.0.0.1"]}`, "want host:port"},
		"bad port":       {`{"version":1,"peers":["10.0.0.1:99999"]}`, "port \"99999\""},
		"bad host":       {`{"version":1,"peers":["a b:1"]}`, "not allowed"},
		"trailing":       {`{"version":1,"peers":[]} {}`, "trailing data"},
		"peers not list": {`{"version":1,"peers":"x"}`, "not a last-known peers file"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "peers.json")
			require.NoError(t, os.WriteFile(path, []byte(c.body), 0o600))
			got, err := LoadLastKnown(path)
			require.Error(t, err)
			assert.Contains(t, err.Error(), c.err)
			assert.Contains(t, err.Error(), path, "the error names the file")
			assert.Nil(t, got)
			b, _ := os.ReadFile(path)
			assert.Equal(t, c.body, string(b), "a bad file is left for the operator to look at")
		})
	}
}

func TestParseSeed(t *testing.T) {
	ok := []string{"10.0.0.7:7946", "pi.local:7946", "[::1]:1", "[fe80::1%eth0]:7946", "host_name.lan:65535"}
	for _, s := range ok {
		_, _, err := ParseSeed(s)
		assert.NoError(t, err, s)
	}
	bad := map[string]string{
		"10.0.0.7":      "want host:port",
		":7946":         "host is empty",
		"pi.local:0":    "from 1 to 65535",
		"pi.local:http": "from 1 to 65535",
		"pi..local:1":   "empty or over-long label",
		"pi/x:1":        "not allowed",
		"::1:7946":      "want host:port",
	}
	for s, want := range bad {
		_, _, err := ParseSeed(s)
		if assert.Error(t, err, s) {
			assert.Contains(t, err.Error(), want, s)
		}
	}
}

func FuzzParseLastKnown(f *testing.F) {
	f.Add([]byte(`{"version":1,"peers":["10.0.0.7:7946","pi.local:1"]}`))
	f.Add([]byte(`{"version":1,"peers":null}`))
	f.Add([]byte(`{"version":1}`))
	f.Add([]byte(`[]`))
	f.Add([]byte("\x00\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		addrs, err := parseLastKnown(b)
		if err != nil {
			return
		}
		// Whatever was accepted must survive a save and a load unchanged.
		path := filepath.Join(t.TempDir(), "p.json")
		if err := SaveLastKnown(path, addrs); err != nil {
			t.Fatalf("accepted %q but cannot save it: %v", addrs, err)
		}
		again, err := LoadLastKnown(path)
		if err != nil {
			t.Fatalf("saved %q but cannot load it: %v", addrs, err)
		}
		if len(again) != len(addrs) {
			t.Fatalf("round trip changed %q to %q", addrs, again)
		}
	})
}
