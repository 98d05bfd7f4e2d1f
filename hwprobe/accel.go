package hwprobe

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// Accelerator kinds.
const (
	KindHailo  = "hailo"
	KindMetal  = "metal"
	KindNVIDIA = "nvidia"
)

// hailoVendor is Hailo's PCI vendor id.
const hailoVendor = 0x1e60

// hailoModels names the Hailo PCI device ids we recognise (PCI_DEVICE_ID_HAILO_* in the
// hailort-drivers headers). Only the Hailo-10H carries memory of its own: 8 GB LPDDR4X on the
// AI HAT+ 2, which is what lets it hold a whole LLM.
var hailoModels = map[uint64]struct {
	name   string
	memory int64
}{
	0x45c4: {"Hailo-10H", 8 << 30},
	0x2864: {"Hailo-8", 0},
}

// pciIDAttr matches the driver's device_id attribute in the 4.x–5.x drivers: "%x:%x" of the
// PCI vendor and device ids, for example "1e60:45c4".
var pciIDAttr = regexp.MustCompile(`^([0-9a-fA-F]{1,4}):([0-9a-fA-F]{1,4})$`)

// probeHailo reports every /dev/hailo* entry (of any file type: a fixture cannot hold device
// nodes). A device is named by its PCI ids, read where the driver puts them:
//
//   - /sys/class/hailo_chardev/<node>/device_id is the hailort PCIe driver's own attribute
//     (linux/pcie/src/sysfs.c), "1e60:45c4" for a Hailo-10H in the 4.x and 5.x drivers. We key
//     on it rather than on the driver's accelerator_type attribute because that one only says
//     NNC or SoC ("1" covers the Hailo-10H but also other SoC-type chips in later drivers).
//   - Newer drivers reduced device_id to the PCI address ("0001:01:00.0"), so when it is not a
//     vendor:device pair we read the ids the kernel itself exposes for the PCI function behind
//     the class device: /sys/class/hailo_chardev/<node>/device/{vendor,device}.
//
// Without either, the device is Kind "hailo", Name "hailo", memory unknown.
func probeHailo(r rootFS) ([]Accelerator, []string) {
	nodes, err := r.glob("/dev/hailo*")
	if err != nil {
		return nil, []string{err.Error()}
	}
	var accs []Accelerator
	var notes []string
	for _, node := range nodes {
		acc := Accelerator{Kind: KindHailo, Name: "hailo", Device: node}
		vendor, device, err := hailoPCIIDs(r, path.Join("/sys/class/hailo_chardev", path.Base(node)))
		switch {
		case err != nil:
			notes = append(notes, fmt.Sprintf("%s: cannot tell which Hailo device it is: %v", node, err))
		case vendor != hailoVendor:
			notes = append(notes, fmt.Sprintf("%s: PCI vendor %04x is not Hailo's", node, vendor))
		default:
			if m, ok := hailoModels[device]; ok {
				acc.Name, acc.Memory = m.name, m.memory
			} else {
				notes = append(notes, fmt.Sprintf("%s: unknown Hailo PCI device %04x", node, device))
			}
		}
		accs = append(accs, acc)
	}
	return accs, notes
}

// hailoPCIIDs reads the PCI vendor and device ids of a hailo_chardev class device.
func hailoPCIIDs(r rootFS, classDir string) (vendor, device uint64, err error) {
	attr, err := r.readString(path.Join(classDir, "device_id"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return 0, 0, err
	}
	if m := pciIDAttr.FindStringSubmatch(attr); m != nil {
		vendor, _ = strconv.ParseUint(m[1], 16, 16)
		device, _ = strconv.ParseUint(m[2], 16, 16)
		return vendor, device, nil
	}
	vendor, err = readPCIID(r, path.Join(classDir, "device", "vendor"))
	if err != nil {
		return 0, 0, err
	}
	device, err = readPCIID(r, path.Join(classDir, "device", "device"))
	if err != nil {
		return 0, 0, err
	}
	return vendor, device, nil
}

// readPCIID reads a PCI sysfs id file: "0x1e60".
func readPCIID(r rootFS, p string) (uint64, error) {
	s, err := r.readString(p)
	if err != nil {
		return 0, err
	}
	hex, ok := strings.CutPrefix(s, "0x")
	if !ok {
		return 0, fmt.Errorf("%s: want 0x and four hex digits, got %q", p, clip(s))
	}
	id, err := strconv.ParseUint(hex, 16, 16)
	if err != nil {
		return 0, fmt.Errorf("%s: want 0x and four hex digits, got %q", p, clip(s))
	}
	return id, nil
}

// nvidiaInfo is what /proc/driver/nvidia/gpus/<bus>/information says about one GPU.
type nvidiaInfo struct {
	Model    string
	Minor    int
	HasMinor bool
}

// parseNvidiaInformation reads the NVIDIA driver's per-GPU information file ("Model: \t NVIDIA
// GeForce RTX 3090", "Device Minor: \t 0", …). The file has no
// memory size: that needs NVML, which the agent does not load.
func parseNvidiaInformation(data []byte) nvidiaInfo {
	var ni nvidiaInfo
	for _, line := range strings.Split(string(data), "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		val = strings.TrimSpace(val)
		switch strings.TrimSpace(key) {
		case "Model":
			if ni.Model == "" {
				ni.Model, _ = printablePrefix([]byte(val))
			}
		case "Device Minor":
			if n, err := strconv.Atoi(val); err == nil && n >= 0 && n < 1<<20 && !ni.HasMinor {
				ni.Minor, ni.HasMinor = n, true
			}
		}
	}
	return ni
}

// probeNVIDIA reports the GPUs the NVIDIA kernel driver lists under /proc/driver/nvidia/gpus.
func probeNVIDIA(r rootFS) ([]Accelerator, []string) {
	files, err := r.glob("/proc/driver/nvidia/gpus/*/information")
	if err != nil {
		return nil, []string{err.Error()}
	}
	var accs []Accelerator
	var notes []string
	for _, f := range files {
		b, err := r.readFile(f)
		if err != nil {
			notes = append(notes, fmt.Sprintf("NVIDIA GPU at %s: %v", path.Dir(f), err))
			accs = append(accs, Accelerator{Kind: KindNVIDIA, Name: KindNVIDIA})
			continue
		}
		ni := parseNvidiaInformation(b)
		acc := Accelerator{Kind: KindNVIDIA, Name: ni.Model}
		if acc.Name == "" {
			acc.Name = KindNVIDIA
			notes = append(notes, fmt.Sprintf("%s: no Model line", f))
		}
		if ni.HasMinor {
			acc.Device = "/dev/nvidia" + strconv.Itoa(ni.Minor)
		}
		accs = append(accs, acc)
	}
	return accs, notes
}
