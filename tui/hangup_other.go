//go:build !unix

package tui

import "os"

// watchHangup: elsewhere the closed console ends the program with its own signal.
func watchHangup(*os.File, func()) (stop func()) { return func() {} }
