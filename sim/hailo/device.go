package hailo

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// defaultKeepAlive is hailo-ollama's keep_alive when a request gives none.
const defaultKeepAlive = 5 * time.Minute

// device is the Hailo-10H as hailo-ollama holds it: one generator, one model at a time, and one
// lock that a generation, a load, an unload or /api/ps takes for its whole length.
type device struct {
	sem     chan struct{} // the generator lock; a channel so a waiter can give up with its ctx
	waiting atomic.Int32

	mu        sync.Mutex // guards the fields below for Stats, which does not take the lock
	model     string
	blob      string
	keepAlive time.Duration
	forever   bool
	lastUse   time.Time
	// everLoaded and degraded follow the swap defect: on an affected release, any load after
	// an earlier one in the same process degrades every answer from then on.
	everLoaded bool
	degraded   bool
}

func (d *device) isDegraded() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.degraded
}

// acquire waits for the device, counting the wait so tests can see a request queued.
func (d *device) acquire(ctx context.Context) error {
	d.waiting.Add(1)
	defer d.waiting.Add(-1)
	select {
	case d.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (d *device) release() { <-d.sem }

// expired tells whether the loaded model's keep_alive has run out at now. Caller holds d.mu.
func (d *device) expired(now time.Time) bool {
	return d.model != "" && !d.forever && !now.Before(d.lastUse.Add(d.keepAlive))
}

// loadedAt is the model on the device at now, counting one whose keep_alive ran out as gone
// (hailo-ollama's reaper thread would have unloaded it).
func (d *device) loadedAt(now time.Time) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.expired(now) {
		return ""
	}
	return d.model
}

// expiresAt is when the loaded model will be unloaded; forever is true for keep_alive < 0.
func (d *device) expiresAt() (model string, at time.Time, forever bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.model, d.lastUse.Add(d.keepAlive), d.forever
}

// reap unloads a model whose keep_alive ran out, as hailo-ollama's reaper would have by now.
// It reports whether it did. Caller holds the device.
func (d *device) reap(now time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.expired(now) {
		return false
	}
	d.model, d.blob = "", ""
	return true
}

// reset takes whatever model is loaded off the device (keep_alive 0). Caller holds the device.
func (d *device) reset() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	had := d.model != ""
	d.model, d.blob, d.forever, d.keepAlive = "", "", false, 0
	return had
}

// keepAliveOf turns a request's keep_alive (seconds; nil when absent) into a duration.
func keepAliveOf(v *int32) (time.Duration, bool) {
	switch {
	case v == nil:
		return defaultKeepAlive, false
	case *v < 0:
		return 0, true
	default:
		return time.Duration(*v) * time.Second, false
	}
}

// load puts model (whose HEF is at blob) on the device, as hailo-ollama's load_model: the keep
// alive is renewed from now; a different HEF than the loaded one releases the device, waits the
// switch delay and loads (the first load too). Caller holds the device. It reports whether a
// load happened.
func (s *Server) load(ctx context.Context, model, blob string, keepAlive *int32) (bool, error) {
	d := s.dev
	if d.reap(s.clock.Now()) {
		s.count(func(st *Stats) { st.Unloads++ })
	}
	ka, forever := keepAliveOf(keepAlive)
	d.mu.Lock()
	same := d.blob == blob && d.model != ""
	d.keepAlive, d.forever, d.lastUse = ka, forever, s.clock.Now()
	if same {
		d.model = model
	}
	d.mu.Unlock()
	if same {
		return false, nil
	}
	if d.reset() {
		s.count(func(st *Stats) { st.Unloads++ })
	}
	if err := s.clock.Sleep(ctx, s.cfg.SwitchDelay); err != nil {
		return false, err
	}
	if err := s.clock.Sleep(ctx, s.timing(model).load); err != nil {
		return false, err
	}
	d.mu.Lock()
	d.model, d.blob = model, blob
	d.keepAlive, d.forever, d.lastUse = ka, forever, s.clock.Now()
	swapped := d.everLoaded && releases[s.cfg.Version].swapDegrades
	d.everLoaded = true
	if swapped && !d.degraded {
		d.degraded = true
		s.log.Warn("hailo-sim: a model loaded after another without a restart; answers are degraded from now on (hailo-rpi5-examples #197)", "model", model)
	}
	d.mu.Unlock()
	s.count(func(st *Stats) { st.Loads++ })
	s.log.Info("hailo-sim loaded model", "model", model)
	return true, nil
}

// timing is the pacing for model: the configured figures, or Hailo's table for PerModel ones.
type timing struct {
	load, ttft, interval time.Duration
}

func (s *Server) timing(model string) timing {
	z, ok := zooModel(model)
	if !ok {
		z = zoo[0] // a model outside the zoo runs like the smallest one
	}
	t := timing{load: z.load, ttft: z.ttft}
	rate := z.tokensPerSec
	if s.cfg.LoadTime != PerModel {
		t.load = s.cfg.LoadTime
	}
	if s.cfg.TTFT != PerModel {
		t.ttft = s.cfg.TTFT
	}
	if s.cfg.TokensPerSecond != PerModel {
		rate = s.cfg.TokensPerSecond
	}
	if rate > 0 {
		t.interval = time.Duration(float64(time.Second) / rate)
	}
	return t
}
