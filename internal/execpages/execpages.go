// Package execpages hands back to the kernel the resident pages of this program's own code
// once the work that brought them in is over.
//
// A Go program's start-up (every package's initialisation, flag parsing, probing the host,
// sizing models) runs code from nearly every package, and the kernel maps a file's pages in
// 64 kB windows around each fault, so a started program keeps almost its whole binary
// resident though idle it runs a fraction of it: the agent held 13 MB of its 15 MB binary
// after start-up, about 5 MB of it in use idle. Those pages are clean copies of the file,
// still in the page cache after Release; they fault back in when run again, just as after the
// kernel reclaimed them under memory pressure, which it may do to them at any time.
package execpages

import "errors"

// ErrUnsupported is Release's error where the platform has no way to do it (not Linux).
var ErrUnsupported = errors.ErrUnsupported
