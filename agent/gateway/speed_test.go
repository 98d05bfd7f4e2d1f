package gateway

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type report struct {
	ttft time.Duration
	tps  float64
}

func TestSpeedBookReportsMeansOncePerPeriod(t *testing.T) {
	var mu sync.Mutex
	var got []report
	reported := make(chan struct{}, 8)
	s := &speedBook{every: 50 * time.Millisecond, report: func(ttft time.Duration, tps float64) {
		mu.Lock()
		got = append(got, report{ttft, tps})
		mu.Unlock()
		reported <- struct{}{}
	}}
	s.add(10*time.Millisecond, 100) // the first goes at once
	<-reported
	s.add(20*time.Millisecond, 0)
	s.add(40*time.Millisecond, 50)
	s.add(0, 0) // not a measurement
	s.add(0, 70)
	select {
	case <-reported:
	case <-time.After(5 * time.Second):
		t.Fatal("the period's measurements were never reported")
	}
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 2)
	assert.Equal(t, report{10 * time.Millisecond, 100}, got[0])
	assert.Equal(t, report{30 * time.Millisecond, 60}, got[1], "means of the period")
}
