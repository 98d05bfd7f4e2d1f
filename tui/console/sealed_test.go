package console

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestAgentURLSealsTheNetworkAndKeepsLoopbackPlain(t *testing.T) {
	for _, tc := range []struct {
		raw            string
		sealed, plain  bool
		want, errWords string
	}{
		{raw: "10.0.0.5:7777", sealed: true, want: "https://10.0.0.5:7777"},
		{raw: "https://10.0.0.5:7777/", sealed: true, want: "https://10.0.0.5:7777"},
		{raw: "http://127.0.0.1:7777", sealed: true, want: "http://127.0.0.1:7777"},
		{raw: "http://localhost:7777", want: "http://localhost:7777"},
		{raw: "127.0.0.1:7777", want: "http://127.0.0.1:7777"},
		{raw: "http://10.0.0.5:7777", sealed: true, errWords: "--insecure-http"},
		{raw: "10.0.0.5:7777", errWords: "--insecure-http"},
		{raw: "http://10.0.0.5:7777", plain: true, want: "http://10.0.0.5:7777"},
		{raw: "https://10.0.0.5:7777", errWords: "llmkube-agent ca"},
		{raw: "ftp://10.0.0.5", sealed: true, errWords: "want http:// or https://"},
	} {
		got, err := agentURL(tc.raw, tc.sealed, tc.plain)
		if tc.errWords != "" {
			require.ErrorContains(t, err, tc.errWords, tc.raw)
			continue
		}
		require.NoError(t, err, tc.raw)
		require.Equal(t, tc.want, got, tc.raw)
	}
}
