package hwprobe

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path"
	"regexp"
	"slices"
	"strings"
	"time"
)

// A Hailo device works only when its kernel driver, the firmware running on it and the HailoRT
// library (libhailort) are of one release. After an upgrade they drift apart: the firmware
// loaded at boot stays the old one until the device is reset (a 5.3 runtime with 5.1.1
// firmware fails until a reboot), and HailoRT refuses a driver of another version ("CHECK
// failed - Driver version (4.23.0) is different from library version (4.22.0)", as users
// report it). The probe reads the three where the host exposes them:
//
//   - driver: /sys/module/<module>/version, the PCIe driver's MODULE_VERSION (hailo1x_pci for
//     the Hailo-10H's 5.x driver, hailo_pci for the Hailo-8's 4.x);
//   - runtime: the version in libhailort.so.<version>'s file name under the library folders;
//   - firmware: the "Firmware Version:" line of `hailortcli fw-control identify`, when the
//     tool is installed (a fixture records its output in hailortcli-identify.txt).

// hailoModules are the PCIe driver modules, newest first.
var hailoModules = []string{"hailo1x_pci", "hailo_pci"}

// libDirs are where distributions and Hailo's packages put libhailort.
var libDirs = []string{"/usr/lib", "/usr/lib/*-linux-gnu", "/usr/local/lib"}

// IdentifyFile is where a fixture root records `hailortcli fw-control identify`.
const IdentifyFile = "hailortcli-identify.txt"

// identifyTimeout bounds the identify command: it talks to the device, which may be busy.
const identifyTimeout = 5 * time.Second

var versionInName = regexp.MustCompile(`libhailort\.so\.([0-9]+\.[0-9]+\.[0-9]+)$`)

// hailoVersions fills the driver, firmware and runtime versions of every Hailo accelerator, and
// returns notes for what could not be read and for a skew.
func (p *prober) hailoVersions(accs []Accelerator) []string {
	if !slices.ContainsFunc(accs, func(a Accelerator) bool { return a.Kind == KindHailo }) {
		return nil // no device: nothing to ask hailortcli about
	}
	var notes []string
	driver := ""
	for _, m := range hailoModules {
		if v, err := p.r.readString(path.Join("/sys/module", m, "version")); err == nil && v != "" {
			driver = v
			break
		}
	}
	var runtimes []string
	for _, dir := range libDirs {
		files, _ := p.r.glob(path.Join(dir, "libhailort.so.*"))
		for _, f := range files {
			if m := versionInName.FindStringSubmatch(f); m != nil && !slices.Contains(runtimes, m[1]) {
				runtimes = append(runtimes, m[1])
			}
		}
	}
	slices.Sort(runtimes)
	firmware, err := p.identifyFirmware()
	if err != nil {
		notes = append(notes, "hailo firmware version unknown: "+err.Error())
	}
	for i := range accs {
		if accs[i].Kind != KindHailo {
			continue
		}
		accs[i].Driver, accs[i].Firmware = driver, firmware
		accs[i].Runtimes = runtimes
		if skew := accs[i].Skew(); skew != "" {
			notes = append(notes, accs[i].Device+": "+skew)
		}
	}
	return notes
}

// identifyFirmware runs (on this host) or reads (under a fixture root) `hailortcli fw-control
// identify` and returns its firmware version; "" without an error when the tool is absent.
func (p *prober) identifyFirmware() (string, error) {
	var out []byte
	if p.live {
		tool, err := exec.LookPath("hailortcli")
		if err != nil {
			return "", nil
		}
		ctx, cancel := context.WithTimeout(p.ctx, identifyTimeout)
		defer cancel()
		out, err = exec.CommandContext(ctx, tool, "fw-control", "identify").Output()
		if err != nil {
			return "", fmt.Errorf("hailortcli fw-control identify: %w", err)
		}
	} else {
		b, err := p.r.readFile("/" + IdentifyFile)
		if err != nil {
			return "", nil // the fixture records no tool
		}
		out = b
	}
	return parseIdentify(out)
}

// parseIdentify reads the firmware version from `hailortcli fw-control identify`:
// "Firmware Version: 5.3.0 (release,app)" gives "5.3.0".
func parseIdentify(out []byte) (string, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(key) != "Firmware Version" {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) == 0 {
			break
		}
		v, _ := printablePrefix([]byte(fields[0]))
		return v, nil
	}
	return "", fmt.Errorf("no Firmware Version line in hailortcli's output")
}

// versions lists the versions known: "driver 5.3.0, firmware 5.1.1, runtime 5.3.0".
func (a Accelerator) versions() string {
	var parts []string
	for _, v := range []struct{ what, version string }{{"driver", a.Driver}, {"firmware", a.Firmware}, {"runtime", strings.Join(a.Runtimes, " and ")}} {
		if v.version != "" {
			parts = append(parts, v.what+" "+v.version)
		}
	}
	return strings.Join(parts, ", ")
}

// Skew says how the Hailo device's driver, firmware and runtime disagree, "" when the ones
// known agree (a version not read is not a disagreement).
func (a Accelerator) Skew() string {
	if len(a.Runtimes) > 1 {
		return fmt.Sprintf("several HailoRT libraries are installed (libhailort %s): a program may load the wrong one", strings.Join(a.Runtimes, ", "))
	}
	var seen []string
	for _, v := range append([]string{a.Driver, a.Firmware}, a.Runtimes...) {
		if v != "" && !slices.Contains(seen, v) {
			seen = append(seen, v)
		}
	}
	if len(seen) < 2 {
		return ""
	}
	return "Hailo versions disagree: " + a.versions()
}
