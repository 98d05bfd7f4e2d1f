package mesh

import (
	"testing"
	"time"
)

func TestSmoothRTT(t *testing.T) {
	s := smoothRTT(0, 8*time.Millisecond)
	if s != 8*time.Millisecond {
		t.Fatalf("the first sample stands alone: %v", s)
	}
	s = smoothRTT(s, 16*time.Millisecond)
	if s != 9*time.Millisecond {
		t.Fatalf("7/8 of the old and 1/8 of the new: %v, want 9ms", s)
	}
}
