//go:build !darwin

package hwprobe

import (
	"errors"
	"runtime"
)

// liveSysctl has no kernel to ask off macOS: a darwin probe of this host needs recorded values.
func liveSysctl() (Sysctl, error) {
	return nil, errors.New("live sysctl values exist only on darwin, not " + runtime.GOOS)
}
