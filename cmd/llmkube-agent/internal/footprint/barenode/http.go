//go:build httpapi

package main

import (
	"encoding/json"
	"net"
	"net/http"

	"github.com/hashicorp/memberlist"
)

// serveStatus serves the member count as JSON on a loopback port and reads it once.
func serveStatus(m *memberlist.Memberlist) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]int{"members": m.NumMembers()})
	}))
	resp, err := http.Get("http://" + ln.Addr().String() + "/")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var st struct{ Members int }
	return json.NewDecoder(resp.Body).Decode(&st)
}
