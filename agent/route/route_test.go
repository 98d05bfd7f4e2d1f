package route

import (
	"context"
	"errors"
	"testing"

	"github.com/llmkube/mesh/agent/api"
)

// replicas are n replicas told apart by their context size: 1, 2, ….
func replicas(n int) []Replica {
	reps := make([]Replica, n)
	for i := range reps {
		reps[i].P = api.Placement{ID: string(rune('a' + i)), Context: i + 1}
	}
	return reps
}

var errRetry, errFinal = errors.New("retry"), errors.New("final")

func judge(_ Replica, err error) (error, bool) { return err, err == errRetry }

// TestFailover: replicas are tried in turn while a failure before the first byte may do
// better elsewhere; the first that answers or commits ends it; a skipped one is not tried;
// the last replica is told it is the last; the client's leaving ends it with its error.
func TestFailover(t *testing.T) {
	cases := []struct {
		name  string
		fails []error // per replica: its failure, nil to answer
		skip  string  // the ID of a replica to pass over
		tried string
		want  error
	}{
		{name: "first answers", fails: []error{nil, nil}, tried: "a"},
		{name: "fails over", fails: []error{errRetry, nil}, tried: "ab"},
		{name: "stops at a final failure", fails: []error{errFinal, nil}, tried: "a", want: errFinal},
		{name: "the last failure", fails: []error{errRetry, errRetry}, tried: "ab", want: errRetry},
		{name: "passes over a skipped one", fails: []error{errRetry, nil, nil}, skip: "b", tried: "ac"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			reps := replicas(len(c.fails))
			tried := ""
			err := Failover(context.Background(), reps, Policy{Judge: judge, Skip: func(r Replica) bool { return r.P.ID == c.skip }},
				func(r Replica, final bool) (bool, error) {
					tried += r.P.ID
					if final != (r.P.ID == reps[len(reps)-1].P.ID) {
						t.Errorf("replica %s told final %v", r.P.ID, final)
					}
					return false, c.fails[r.P.Context-1]
				})
			if tried != c.tried || err != c.want {
				t.Fatalf("tried %q, returned %v; want %q, %v", tried, err, c.tried, c.want)
			}
		})
	}
	t.Run("committed", func(t *testing.T) {
		tried := 0
		err := Failover(context.Background(), replicas(2), Policy{Judge: judge}, func(Replica, bool) (bool, error) {
			tried++
			return true, errRetry // something reached the client: the request is answered
		})
		if err != nil || tried != 1 {
			t.Fatalf("tried %d, returned %v", tried, err)
		}
	})
	t.Run("client left", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		tried := 0
		err := Failover(ctx, replicas(2), Policy{Judge: judge}, func(Replica, bool) (bool, error) {
			tried++
			cancel()
			return false, errRetry
		})
		if !errors.Is(err, context.Canceled) || tried != 1 {
			t.Fatalf("tried %d, returned %v", tried, err)
		}
	})
}
