package common

import "time"

// Sample is one memory reading of a host.
type Sample struct {
	At        time.Time
	Committed int64
	Reserved  int64
	Available int64
	Budget    int64
	Total     int64
}

// History keeps the last N samples per host, for the host detail chart.
type History struct {
	max  int
	byID map[string][]Sample
}

// NewHistory keeps up to max samples per host.
func NewHistory(max int) *History { return &History{max: max, byID: map[string][]Sample{}} }

// Record adds a sample of every agent in the view.
func (h *History) Record(at time.Time, members []MemberMemory) {
	for _, m := range members {
		s := append(h.byID[m.Name], Sample{At: at, Committed: m.Committed, Reserved: m.Reserved, Available: m.Available, Budget: m.Budget, Total: m.Total})
		if over := len(s) - h.max; over > 0 {
			s = append(s[:0:0], s[over:]...)
		}
		h.byID[m.Name] = s
	}
}

// Of returns a host's samples, oldest first.
func (h *History) Of(host string) []Sample { return h.byID[host] }

// MemberMemory is what History records of one host.
type MemberMemory struct {
	Name                                          string
	Committed, Reserved, Available, Budget, Total int64
}
