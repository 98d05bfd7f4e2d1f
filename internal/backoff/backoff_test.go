package backoff

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestBackoffDoublesUpToMaxAndStartsOver(t *testing.T) {
	b := New(200*time.Millisecond, time.Second)
	var got []time.Duration
	for range 5 {
		got = append(got, b.Next())
	}
	assert.Equal(t, []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}, got)
	assert.True(t, b.AtMax())
	b.Reset()
	assert.False(t, b.AtMax())
	assert.Equal(t, 200*time.Millisecond, b.Next())
}

func TestBackoffMaxBelowFirst(t *testing.T) {
	b := New(time.Second, 0) // a cap below the start never shortens the start
	assert.Equal(t, time.Second, b.Next())
	assert.Equal(t, time.Second, b.Next())
}

func TestJitterAddsUpToAQuarter(t *testing.T) {
	for range 1000 {
		j := Jitter(400 * time.Millisecond)
		assert.GreaterOrEqual(t, j, 400*time.Millisecond)
		assert.LessOrEqual(t, j, 500*time.Millisecond)
	}
	assert.Equal(t, time.Duration(0), Jitter(0))
}
