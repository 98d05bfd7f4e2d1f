package mesh

import (
	"testing"
	"time"
)

func TestRTTFloor(t *testing.T) {
	var f rttFloor
	if f.value() != 0 {
		t.Fatalf("no ack yet: %v", f.value())
	}
	f.add(8 * time.Millisecond)
	f.add(300 * time.Millisecond) // a busy host's late ack
	if f.value() != 8*time.Millisecond {
		t.Fatalf("a late ack does not move the link: %v, want 8ms", f.value())
	}
	for range 8 {
		f.add(20 * time.Millisecond)
	}
	if f.value() != 20*time.Millisecond {
		t.Fatalf("the last 8 acks count, not older ones: %v, want 20ms", f.value())
	}
}
