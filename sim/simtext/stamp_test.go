package simtext

import (
	"encoding/json"
	"testing"
	"time"
)

// TestStamp: a stamp survives JSON encoding in an answer's line and reads back to the
// nanosecond; lines without one, or with a broken one, have none.
func TestStamp(t *testing.T) {
	at := time.Unix(1764672000, 123456789)
	line, err := json.Marshal(map[string]any{"message": map[string]string{"content": Stamp(" river", at)}, "done": false})
	if err != nil {
		t.Fatal(err)
	}
	got, ok := StampIn(line)
	if !ok || !got.Equal(at) {
		t.Fatalf("StampIn(%s) = %v, %v; want %v", line, got, ok, at)
	}
	for _, bad := range []string{`{"content":" river"}`, `{"content":"[t=]"}`, `{"content":"[t=12x]"}`, `{"content":"[t=-5]"}`, `{"content":"[t=99"}`} {
		if got, ok := StampIn([]byte(bad)); ok {
			t.Errorf("StampIn(%s) = %v, want none", bad, got)
		}
	}
	for _, tok := range corpus {
		if _, ok := StampIn([]byte(tok)); ok {
			t.Errorf("the corpus token %q reads as a stamp", tok)
		}
	}
}
