package hwprobe

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path"
	"strings"
	"time"
)

// Whether a host runs on battery decides where an intent that asks for a host on mains power
// may go ("not on battery"). The probe reads it where the OS says it:
//
//   - Linux: /sys/class/power_supply/*. A system battery (type "Battery", scope not "Device":
//     a wireless mouse's battery is a "Device" one) whose status is "Discharging" runs the host;
//     so does a battery while every external supply (type "Mains", "USB…" or "Wireless") says
//     online 0. An external supply online, or a battery charging, full or not charging, is not
//     on battery. A host with no system battery is never on battery.
//   - macOS: `pmset -g batt`, whose first line says "Now drawing from 'Battery Power'" (or 'UPS
//     Power': a UPS's battery) or "'AC Power'" (a fixture records its output in PmsetFile).
//
// What cannot be read, or reads oddly, is unknown (FieldOnBattery) and counts as not on battery:
// a host is kept from placements only on a clear word that it drains a battery.

// FieldOnBattery is Info.OnBattery's name in Info.Unknown.
const FieldOnBattery = "on_battery"

// PmsetFile is where a fixture root records `pmset -g batt`.
const PmsetFile = "pmset-batt.txt"

// pmsetTimeout bounds `pmset -g batt`, run at every refresh on a Mac.
const pmsetTimeout = 5 * time.Second

// maxSupplies bounds the power supplies read: a real host has a handful.
const maxSupplies = 64

// supplies is what /sys/class/power_supply says, counted.
type supplies struct {
	batteries   int // system batteries
	discharging int // system batteries discharging
	charged     int // system batteries charging, full or not charging: external power is there
	online      int // external supplies online
	offline     int // external supplies offline
	odd         []string
}

func (p *prober) linuxPower() {
	dirs, err := p.r.glob("/sys/class/power_supply/*")
	if err != nil {
		p.unknown(FieldOnBattery, err.Error())
		return
	}
	if len(dirs) > maxSupplies {
		p.note(fmt.Sprintf("/sys/class/power_supply has %d supplies: read the first %d", len(dirs), maxSupplies))
		dirs = dirs[:maxSupplies]
	}
	var s supplies
	for _, d := range dirs {
		p.readSupply(d, &s)
	}
	on, known := s.onBattery()
	p.info.OnBattery = on
	if !known {
		why := "a battery whose status says nothing"
		if len(s.odd) > 0 {
			why = strings.Join(s.odd, "; ")
		}
		p.unknown(FieldOnBattery, why)
	}
}

// readSupply reads one /sys/class/power_supply/<name> folder into s. A folder that is not a
// supply at all (no type) is skipped; odd values are recorded as such.
func (p *prober) readSupply(dir string, s *supplies) {
	typ, err := p.r.readString(path.Join(dir, "type"))
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		s.odd = append(s.odd, err.Error())
		return
	}
	switch {
	case typ == "Battery":
		if scope, _ := p.r.readString(path.Join(dir, "scope")); scope == "Device" {
			return // a peripheral's battery (a mouse, a headset) powers no host
		}
		s.batteries++
		status, err := p.r.readString(path.Join(dir, "status"))
		switch {
		case err != nil:
			if !errors.Is(err, fs.ErrNotExist) {
				s.odd = append(s.odd, err.Error())
			}
		case status == "Discharging":
			s.discharging++
		case status == "Charging", status == "Full", status == "Not charging":
			s.charged++
		case status == "Unknown":
		default:
			s.odd = append(s.odd, fmt.Sprintf("%s/status: %q is no battery status", dir, clip(status)))
		}
	case typ == "Mains", typ == "Wireless", strings.HasPrefix(typ, "USB"):
		online, err := p.r.readString(path.Join(dir, "online"))
		switch {
		case err != nil:
			if !errors.Is(err, fs.ErrNotExist) {
				s.odd = append(s.odd, err.Error())
			}
		case online == "0":
			s.offline++
		case online == "1" || online == "2": // 2: online, on a programmable (USB PD) supply
			s.online++
		default:
			s.odd = append(s.odd, fmt.Sprintf("%s/online: %q is not 0 or 1", dir, clip(online)))
		}
	}
}

// onBattery decides from what was read; known is false when something read oddly and what
// was read clearly does not settle it, or a battery exists and nothing says where the power
// comes from.
func (s supplies) onBattery() (on, known bool) {
	switch {
	case s.discharging > 0:
		return true, true
	case s.batteries > 0 && (s.online > 0 || s.charged > 0):
		return false, true
	case len(s.odd) > 0:
		return false, false
	case s.batteries == 0:
		return false, true
	case s.offline > 0:
		return true, true
	}
	return false, false
}

// darwinPower reads `pmset -g batt`: run on this host, recorded in PmsetFile under a fixture
// root (no file: the recorded host has no battery to speak of).
func (p *prober) darwinPower() {
	var out []byte
	if p.live {
		ctx, cancel := context.WithTimeout(p.ctx, pmsetTimeout)
		defer cancel()
		var err error
		if out, err = exec.CommandContext(ctx, "/usr/bin/pmset", "-g", "batt").Output(); err != nil {
			p.unknown(FieldOnBattery, "pmset -g batt: "+err.Error())
			return
		}
	} else {
		b, err := p.r.readFile("/" + PmsetFile)
		if errors.Is(err, fs.ErrNotExist) {
			return
		}
		if err != nil {
			p.unknown(FieldOnBattery, err.Error())
			return
		}
		out = b
	}
	on, err := parsePmset(out)
	if err != nil {
		p.unknown(FieldOnBattery, err.Error())
		return
	}
	p.info.OnBattery = on
}

// parsePmset reads the power source from `pmset -g batt`: "Now drawing from 'Battery Power'".
func parsePmset(out []byte) (bool, error) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		_, src, ok := strings.Cut(sc.Text(), "Now drawing from ")
		if !ok {
			continue
		}
		switch src = strings.TrimSpace(src); src {
		case "'Battery Power'", "'UPS Power'":
			return true, nil
		case "'AC Power'":
			return false, nil
		}
		return false, fmt.Errorf("pmset -g batt: unknown power source %q", clip(src))
	}
	return false, errors.New(`pmset -g batt: no "Now drawing from" line`)
}
