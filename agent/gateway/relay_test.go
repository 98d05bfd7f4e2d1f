package gateway

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// matchStop writes what cannot begin a stop sequence, holds back a tail that may, and ends the
// answer at the earliest sequence, wherever the engine's pieces split it.
func TestRelayMatchStop(t *testing.T) {
	for _, c := range []struct {
		name    string
		stops   []string
		pieces  []string
		written string // what went out before the end
		held    string // what a final chunk would flush
		stopped string
	}{
		{"no stop sequence occurs", []string{"END"}, []string{"a", "b E", "N", "x"}, "ab ENx", "", ""},
		{"a tail that may begin one is held", []string{"END"}, []string{"ab E", "N"}, "ab ", "EN", ""},
		{"one split over three pieces", []string{"END"}, []string{"ab E", "N", "D and more"}, "ab ", "", "END"},
		{"in one piece", []string{"END"}, []string{"xEND"}, "x", "", "END"},
		{"at the very start", []string{"END"}, []string{"END of it"}, "", "", "END"},
		{"the earliest of two", []string{"two", "one"}, []string{"zero one two"}, "zero ", "", "one"},
		{"a longer one holds more", []string{"E", "Xyz"}, []string{"aX", "y"}, "a", "Xy", ""},
		{"runes are not split", []string{"été"}, []string{"un é", "t"}, "un ", "ét", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			run := &relay{stops: c.stops}
			var written string
			for _, p := range c.pieces {
				written += run.matchStop(p)
				if run.stopped != "" {
					break
				}
			}
			assert.Equal(t, c.written, written)
			assert.Equal(t, c.held, run.held)
			assert.Equal(t, c.stopped, run.stopped)
		})
	}
}
