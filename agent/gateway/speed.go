package gateway

import (
	"sync"
	"time"
)

// speedEvery is how often a placement's measurements go to the agent. Each report changes the
// agent's state (and may publish a state document to the mesh), so a busy placement reports
// the mean of its requests once a period rather than once a request; a placement's first
// measurement goes at once.
const speedEvery = time.Second

// speedBook gathers the measurements of one placement between reports.
type speedBook struct {
	mu             sync.Mutex
	ttft           time.Duration
	ttftN          int
	tps            float64
	tpsN           int
	last           time.Time // last report
	timer          *time.Timer
	report         func(ttft time.Duration, tps float64)
	every          time.Duration
	reportedBefore bool
}

// speedOf returns the book of a placement on this host.
func (g *Gateway) speedOf(id string) *speedBook {
	g.mu.RLock()
	s, ok := g.speeds[id]
	g.mu.RUnlock()
	if ok {
		return s
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if s, ok = g.speeds[id]; !ok {
		s = &speedBook{every: speedEvery, report: func(ttft time.Duration, tps float64) { g.a.RecordSpeed(id, ttft, tps) }}
		g.speeds[id] = s
	}
	return s
}

// add records one request's time to first token and tokens per second (zeros are not
// measurements) and reports when a period has passed since the last report.
func (s *speedBook) add(ttft time.Duration, tps float64) {
	if ttft <= 0 && tps <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if ttft > 0 {
		s.ttft += ttft
		s.ttftN++
	}
	if tps > 0 {
		s.tps += tps
		s.tpsN++
	}
	wait := s.every - time.Since(s.last)
	switch {
	case !s.reportedBefore || wait <= 0:
		s.flushLocked()
	case s.timer == nil:
		s.timer = time.AfterFunc(wait, s.flush)
	}
}

func (s *speedBook) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.flushLocked()
}

// flushLocked reports the means gathered since the last report.
func (s *speedBook) flushLocked() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.ttftN == 0 && s.tpsN == 0 {
		return
	}
	var ttft time.Duration
	var tps float64
	if s.ttftN > 0 {
		ttft = s.ttft / time.Duration(s.ttftN)
	}
	if s.tpsN > 0 {
		tps = s.tps / float64(s.tpsN)
	}
	s.ttft, s.ttftN, s.tps, s.tpsN = 0, 0, 0, 0
	s.last = time.Now()
	s.reportedBefore = true
	s.report(ttft, tps)
}
