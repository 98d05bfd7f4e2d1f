//go:build !httpapi

package main

import "github.com/hashicorp/memberlist"

// serveStatus serves nothing: the bare node is memberlist alone.
func serveStatus(*memberlist.Memberlist) error { return nil }
