//go:build !linux

package execpages

// Release is not supported here: the program keeps its pages.
func Release() (int64, error) { return 0, ErrUnsupported }
