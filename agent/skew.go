package agent

import (
	"fmt"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/hwprobe"
)

// skewFindings names a Hailo device whose driver, firmware and HailoRT library disagree, as
// hwprobe read them at start (hwprobe/hailoversions.go says where), with the fix for the kind of
// drift: firmware left behind by an upgrade wants a reboot; a driver and library of different
// releases want the matching packages reinstalled.
func (a *Agent) skewFindings(host string) []api.Finding {
	a.mu.Lock()
	accs := append([]hwprobe.Accelerator(nil), a.host.Accelerators...)
	a.mu.Unlock()
	var out []api.Finding
	for _, acc := range accs {
		skew := acc.Skew()
		if acc.Kind != hwprobe.KindHailo || skew == "" {
			continue
		}
		out = append(out, api.Finding{
			Severity: api.SeverityError,
			Problem:  fmt.Sprintf("the %s on %s (%s): %s; HailoRT fails on such a device, and hailo-ollama with it", acc.Name, host, acc.Device, skew),
			Fix:      skewFix(acc),
		})
	}
	return out
}

func skewFix(acc hwprobe.Accelerator) string {
	packages := "the matching packages of one release (Hailo's hailort, hailort-pcie-driver and hailo-gen-ai-model-zoo; on Raspberry Pi OS's own 5.1.1 packages, hailo-h10-all)"
	if len(acc.Runtimes) > 1 {
		return fmt.Sprintf("remove the HailoRT libraries other than the driver's release (%s): reinstall %s, then reboot", orUnknown(acc.Driver), packages)
	}
	runtime := ""
	if len(acc.Runtimes) == 1 {
		runtime = acc.Runtimes[0]
	}
	if acc.Driver != "" && runtime != "" && acc.Driver != runtime {
		return fmt.Sprintf("the kernel driver (%s) and the HailoRT library (%s) are of different releases: reinstall %s, then reboot", acc.Driver, runtime, packages)
	}
	installed := acc.Driver
	if installed == "" {
		installed = runtime
	}
	return fmt.Sprintf("the device still runs the firmware it loaded at boot (%s), not the installed release's (%s): reboot the host so it loads the matching firmware; if the versions still disagree after the reboot, reinstall %s",
		acc.Firmware, installed, packages)
}

func orUnknown(v string) string {
	if v == "" {
		return "unknown"
	}
	return v
}
