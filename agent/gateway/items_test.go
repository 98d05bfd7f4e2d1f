package gateway

import (
	"strconv"
	"strings"
	"testing"
)

func TestItemStoreBounds(t *testing.T) {
	s := newItemStore()
	for i := range maxItems + 10 {
		s.put("ns", strconv.Itoa(i), "text")
	}
	if _, ok := s.get("ns", "0"); ok {
		t.Error("the oldest item outlived the entry bound")
	}
	if got, ok := s.get("ns", strconv.Itoa(maxItems+9)); !ok || got != "text" {
		t.Errorf("the newest item: %q, %v", got, ok)
	}
	if _, ok := s.get("other", strconv.Itoa(maxItems+9)); ok {
		t.Error("an item seen from another scope")
	}
	if len(s.items) != maxItems || len(s.order) != maxItems {
		t.Errorf("%d items, %d in order: want %d", len(s.items), len(s.order), maxItems)
	}
	big := strings.Repeat("x", maxItemBytes/16-1)
	for i := range 20 {
		s.put("ns", "big"+strconv.Itoa(i), big)
	}
	if s.bytes > maxItemBytes {
		t.Errorf("%d bytes kept: more than %d", s.bytes, maxItemBytes)
	}
	s.put("ns", "huge", strings.Repeat("x", maxItemBytes/16+1))
	if _, ok := s.get("ns", "huge"); ok {
		t.Error("a huge answer was kept")
	}
}
