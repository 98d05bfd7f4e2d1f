package hwprobe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// supply is one /sys/class/power_supply/<name> folder's attributes, as the kernel writes them.
func supply(name string, attrs map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range attrs {
		out["sys/class/power_supply/"+name+"/"+k] = v + "\n"
	}
	return out
}

func merge(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// A laptop's sysfs in its usual states, and the odd ones: only a clear word that a system
// battery runs the host makes it "on battery"; what reads oddly is unknown, never a crash.
func TestLinuxPower(t *testing.T) {
	bat := func(status string) map[string]string {
		return supply("BAT0", map[string]string{"type": "Battery", "status": status, "capacity": "81", "scope": "System"})
	}
	ac := func(online string) map[string]string {
		return supply("AC", map[string]string{"type": "Mains", "online": online})
	}
	usb := func(name, online string) map[string]string {
		return supply(name, map[string]string{"type": "USB", "online": online, "usb_type": "C [PD] PD_PPS"})
	}
	mouse := supply("hid-00:1f:20:aa:bb:cc-battery", map[string]string{"type": "Battery", "status": "Discharging", "scope": "Device"})
	for _, c := range []struct {
		name    string
		files   map[string]string
		on      bool
		unknown string // a part of the note when the answer is unknown
	}{
		{name: "no power_supply class: a server", files: map[string]string{"proc/meminfo": "MemTotal: 1 kB\n"}},
		{name: "a desktop's mains only", files: ac("1")},
		{name: "unplugged laptop", files: merge(bat("Discharging"), ac("0")), on: true},
		{name: "plugged laptop charging", files: merge(bat("Charging"), ac("1"))},
		{name: "plugged laptop full", files: merge(bat("Full"), ac("1"))},
		{name: "plugged, held below a charge threshold", files: merge(bat("Not charging"), ac("1"))},
		{name: "draining while plugged into a weak charger", files: merge(bat("Discharging"), usb("ucsi-source-psy-USBC000-001", "1")), on: true},
		{name: "battery status unknown, every USB-C port offline", files: merge(bat("Unknown"), usb("ucsi-source-psy-USBC000-001", "0"), usb("ucsi-source-psy-USBC000-002", "0")), on: true},
		{name: "battery status unknown, one USB-C port online", files: merge(bat("Unknown"), usb("ucsi-source-psy-USBC000-001", "0"), usb("ucsi-source-psy-USBC000-002", "1"))},
		{name: "no system battery, a mouse's discharging", files: merge(mouse, ac("1"))},
		{name: "a mouse's battery alone", files: mouse},
		{name: "a battery that says nothing", files: bat("Unknown"), unknown: "a battery whose status says nothing"},
		{name: "garbled status", files: bat("\x00\xffzz"), unknown: `/sys/class/power_supply/BAT0/status: "\x00\xffzz" is no battery status`},
		{name: "garbled online", files: merge(bat("Unknown"), ac("yes")), unknown: `/sys/class/power_supply/AC/online: "yes" is not 0 or 1`},
		{name: "garbled online, battery says discharging", files: merge(bat("Discharging"), ac("yes")), on: true},
		{name: "a folder with no type", files: supply("weird", map[string]string{"status": "Discharging"})},
		{name: "a type that is a folder", files: map[string]string{"sys/class/power_supply/BAT0/type/x": ""}, unknown: "/sys/class/power_supply/BAT0/type"},
	} {
		t.Run(c.name, func(t *testing.T) {
			root := writeTree(t, c.files)
			for _, info := range []Info{
				Probe(t.Context(), Options{Root: root, OS: "linux", Arch: "amd64"}),
				ProbeLive(t.Context(), Options{Root: root, OS: "linux", Arch: "amd64"}),
			} {
				assert.Equal(t, c.on, info.OnBattery)
				assert.Equal(t, c.unknown == "", info.Known(FieldOnBattery), info.Notes)
				if c.unknown != "" {
					assert.True(t, containsNote(info.Notes, "on_battery unknown: "), info.Notes)
					assert.True(t, containsNote(info.Notes, c.unknown), info.Notes)
				}
			}
		})
	}
}

func containsNote(notes []string, part string) bool {
	for _, n := range notes {
		if strings.Contains(n, part) {
			return true
		}
	}
	return false
}

// Real sysfs lists supplies as symbolic links into /sys/devices: the probe follows them.
func TestLinuxPowerThroughLinks(t *testing.T) {
	root := writeTree(t, merge(
		map[string]string{"sys/devices/LNXSYSTM:00/PNP0C0A:00/power_supply/BAT0/type": "Battery\n", "sys/devices/LNXSYSTM:00/PNP0C0A:00/power_supply/BAT0/status": "Discharging\n"},
	))
	require.NoError(t, os.MkdirAll(filepath.Join(root, "sys/class/power_supply"), 0o755))
	require.NoError(t, os.Symlink("../../devices/LNXSYSTM:00/PNP0C0A:00/power_supply/BAT0", filepath.Join(root, "sys/class/power_supply/BAT0")))
	info := ProbeLive(t.Context(), Options{Root: root, OS: "linux", Arch: "arm64"})
	assert.True(t, info.OnBattery, info.Notes)
	assert.True(t, info.Known(FieldOnBattery))
}

// `pmset -g batt` as macOS prints it on a MacBook on battery and on AC power, and on a Mac
// mini; what it cannot read is an error, counted as not on battery.
func TestParsePmset(t *testing.T) {
	for _, c := range []struct {
		name, out string
		on        bool
		err       string
	}{
		{"on battery", "Now drawing from 'Battery Power'\n -InternalBattery-0 (id=4653155)\t85%; discharging; 5:12 remaining present: true\n", true, ""},
		{"on AC", "Now drawing from 'AC Power'\n -InternalBattery-0 (id=4653155)\t100%; charged; 0:00 remaining present: true\n", false, ""},
		{"charging", "Now drawing from 'AC Power'\n -InternalBattery-0 (id=4653155)\t42%; charging; 1:10 remaining present: true\n", false, ""},
		{"a Mac mini", "Now drawing from 'AC Power'\n", false, ""},
		{"a UPS on its battery", "Now drawing from 'UPS Power'\n -Back-UPS ES 700 (id=12345)\t95%; discharging; (no estimate) present: true\n", true, ""},
		{"empty", "", false, `no "Now drawing from" line`},
		{"unknown source", "Now drawing from 'Solar Power'\n", false, `unknown power source "'Solar Power'"`},
	} {
		t.Run(c.name, func(t *testing.T) {
			on, err := parsePmset([]byte(c.out))
			assert.Equal(t, c.on, on)
			if c.err == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, c.err)
			}
		})
	}
}

// A Mac fixture records `pmset -g batt` in PmsetFile: the probe reads it, the refresh too; a
// fixture with none records a Mac with no battery, and a garbled one is unknown.
func TestDarwinPowerFromRecordedPmset(t *testing.T) {
	sysctl, err := os.ReadFile(filepath.Join("testdata", "mac-m2", "sysctl.txt"))
	require.NoError(t, err)
	for _, c := range []struct {
		pmset string // "" for no file
		on    bool
		known bool
	}{
		{"Now drawing from 'Battery Power'\n -InternalBattery-0 (id=4653155)\t85%; discharging; 5:12 remaining present: true\n", true, true},
		{"Now drawing from 'AC Power'\n -InternalBattery-0 (id=4653155)\t100%; charged; 0:00 remaining present: true\n", false, true},
		{"", false, true},
		{"\x00\x01garbage", false, false},
	} {
		files := map[string]string{"sysctl.txt": string(sysctl)}
		if c.pmset != "" {
			files[PmsetFile] = c.pmset
		}
		root := writeTree(t, files)
		for _, info := range []Info{
			Probe(t.Context(), Options{Root: root, OS: "darwin", Arch: "arm64"}),
			ProbeLive(t.Context(), Options{Root: root, OS: "darwin", Arch: "arm64"}),
		} {
			assert.Equal(t, c.on, info.OnBattery, c.pmset)
			assert.Equal(t, c.known, info.Known(FieldOnBattery), c.pmset)
			assert.Equal(t, "Apple M2", Probe(t.Context(), Options{Root: root, OS: "darwin", Arch: "arm64"}).Chip, "the rest of the probe is unchanged")
		}
	}
}
