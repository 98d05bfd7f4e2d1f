package console

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/agent/api/apiclient"
)

// agentDoctorTimeout bounds one agent's report: an agent's own fresh checks take up to 5 s
// (agent.doctorTimeout); one that does not answer by then is itself the finding.
const agentDoctorTimeout = 8 * time.Second

// Doctor is the doctor's report as the console sees it: its own membership's and discovery's
// findings (member mode) merged with every alive agent's (GET /v1/doctor), each finding once
// with the members that saw it.
type Doctor struct {
	Mode string `json:"mode"`
	// Node is the console's own member name (member mode).
	Node string `json:"node,omitempty"`
	// Agents are the agents whose reports are merged in.
	Agents   []string      `json:"agents"`
	Findings []api.Finding `json:"findings"` // errors first
}

// Doctor explains why hosts may be invisible or unusable: what this console sees and what each
// alive agent sees from where it stands (a host cut off from the others, a foreign secret
// knocking at one agent, an engine down), as the connection's token may see it. Through one
// agent's API (agent mode) it asks that agent only: the others may be out of this console's
// reach, and that agent's report covers what it sees of them.
func (c *Conn) Doctor(ctx context.Context) Doctor {
	own := c.src.doctor(ctx)
	who := c.principal()
	d := Doctor{Mode: own.Mode, Node: own.Node, Agents: []string{}}
	self := own.Node
	if self == "" {
		self = "this console"
	}
	d.Findings = api.MergeFindings(nil, self, who.ScopeFindings(own.Findings))

	type answer struct {
		name   string
		client *apiclient.Client
		rep    api.DoctorReport
		err    error
	}
	var answers []answer
	if as, ok := c.src.(*agentSource); ok {
		answers = []answer{{name: "at " + as.client.BaseURL, client: as.client}}
	} else {
		v := c.View()
		for _, a := range Agents(v) {
			answers = append(answers, answer{name: a.Name, client: c.clientOf(v, a)})
		}
	}
	var wg sync.WaitGroup
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			actx, cancel := context.WithTimeout(ctx, agentDoctorTimeout)
			defer cancel()
			answers[i].rep, answers[i].err = answers[i].client.Doctor(actx)
		}()
	}
	wg.Wait()
	for _, a := range answers {
		if a.err != nil {
			d.Findings = api.MergeFindings(d.Findings, self, []api.Finding{{Severity: api.SeverityWarning,
				Problem: "agent " + a.name + " did not give its doctor's report: " + a.err.Error(),
				Fix:     "its own findings (engines, what it sees of the mesh) are missing here: check that this console reaches its API, or run the doctor on that host"}})
			continue
		}
		name := cmp.Or(a.rep.Node, a.name)
		d.Agents = append(d.Agents, name)
		// The agent scoped its report to the token already.
		d.Findings = api.MergeFindings(d.Findings, name, a.rep.Findings)
	}
	for i := range d.Findings {
		slices.Sort(d.Findings[i].SeenBy)
	}
	api.SortFindings(d.Findings)
	return d
}
