package events

import (
	"testing"

	"github.com/llmkube/mesh/agent/api"
)

func TestReplayThenLiveWithoutGapOrRepeat(t *testing.T) {
	h := New("pi", 4)
	var seqs []uint64
	for i := 0; i < 6; i++ {
		seqs = append(seqs, h.Publish(api.Event{Type: api.EventLog, Message: "x"}).Seq)
	}
	// The ring holds the last 4; asking from the 3rd replays the 4th, 5th and 6th.
	replay, sub := h.Subscribe(seqs[2], nil)
	defer sub.Close()
	if len(replay) != 3 || replay[0].Seq != seqs[3] || replay[2].Seq != seqs[5] {
		t.Fatalf("replay = %+v", replay)
	}
	if replay[0].Host != "pi" || replay[0].Time.IsZero() {
		t.Fatal("events are not stamped with host and time")
	}
	ev := h.Publish(api.Event{Type: api.EventLog})
	got := <-sub.C()
	if got.Seq != ev.Seq || got.Seq != seqs[5]+1 {
		t.Fatalf("live event seq %d, want %d", got.Seq, seqs[5]+1)
	}
	// after = 0: live only.
	replay, sub2 := h.Subscribe(0, nil)
	defer sub2.Close()
	if len(replay) != 0 {
		t.Fatalf("after=0 replayed %d events", len(replay))
	}
}

func TestFilter(t *testing.T) {
	h := New("pi", 16)
	onlyA := func(ev api.Event) bool { return ev.Placement == nil || ev.Placement.Namespace == "a" }
	h.Publish(api.Event{Type: api.EventPlacement, Placement: &api.Placement{Namespace: "b"}})
	first := h.Publish(api.Event{Type: api.EventPlacement, Placement: &api.Placement{Namespace: "a"}})
	replay, sub := h.Subscribe(1, onlyA)
	defer sub.Close()
	if len(replay) != 1 || replay[0].Seq != first.Seq {
		t.Fatalf("filtered replay = %+v", replay)
	}
	h.Publish(api.Event{Type: api.EventPlacement, Placement: &api.Placement{Namespace: "b"}})
	want := h.Publish(api.Event{Type: api.EventEngine})
	if got := <-sub.C(); got.Seq != want.Seq {
		t.Fatalf("got seq %d (type %s), want the engine event %d", got.Seq, got.Type, want.Seq)
	}
}

func TestSlowSubscriberIsCutOff(t *testing.T) {
	h := New("pi", 8)
	_, slow := h.Subscribe(0, nil)
	for i := 0; i < subBuffer+1; i++ {
		h.Publish(api.Event{Type: api.EventLog})
	}
	n := 0
	for range slow.C() {
		n++
	}
	if n != subBuffer {
		t.Fatalf("slow subscriber got %d events before being cut off, want %d", n, subBuffer)
	}
	slow.Close() // closing after a cut-off is harmless
}
