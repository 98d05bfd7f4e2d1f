package api

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestMergeAndScopeFindings(t *testing.T) {
	dead := Finding{Severity: SeverityError, Problem: "agent pi is dead", Detail: "dead for 3s"}
	model := Finding{Severity: SeverityError, Problem: `model "m" on pi cannot be served`, Namespace: "team-a"}
	note := Finding{Severity: SeverityInfo, Problem: "mDNS browses on eth0"}

	var all []Finding
	all = MergeFindings(all, "laptop", []Finding{note, dead})
	later := dead
	later.Detail = "dead for 4s" // the same problem, seen a moment later
	all = MergeFindings(all, "mac", []Finding{later, model})
	all = MergeFindings(all, "mac", []Finding{later}) // a member counts once
	SortFindings(all)

	assert.Equal(t, []Finding{
		{Severity: SeverityError, Problem: "agent pi is dead", Detail: "dead for 3s", SeenBy: []string{"laptop", "mac"}},
		{Severity: SeverityError, Problem: `model "m" on pi cannot be served`, Namespace: "team-a", SeenBy: []string{"mac"}},
		{Severity: SeverityInfo, Problem: "mDNS browses on eth0", SeenBy: []string{"laptop"}},
	}, all)
	assert.Len(t, Principal{Admin: true}.ScopeFindings(all), 3)
	assert.Len(t, Principal{Namespace: "team-a"}.ScopeFindings(all), 3)
	b := Principal{Namespace: "team-b"}.ScopeFindings(all)
	assert.Len(t, b, 2, "another namespace's model is not named to team-b")
	for _, f := range b {
		assert.Empty(t, f.Namespace)
	}
}
