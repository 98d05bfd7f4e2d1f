package hwprobe

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/llmkube/mesh/agent/api"
)

// WriteTable writes info as a two-column table for people: sizes as the API writes them,
// "unknown" for what could not be read, one row per accelerator and per note.
func WriteTable(w io.Writer, info Info) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	text := func(field, v string) string {
		if !info.Known(field) || v == "" {
			return "unknown"
		}
		return v
	}
	num := func(field string, n int) string {
		if !info.Known(field) {
			return "unknown"
		}
		return strconv.Itoa(n)
	}
	mem := func(field string, n int64) string {
		if !info.Known(field) {
			return "unknown"
		}
		return api.FormatBytes(n)
	}
	m := info.Memory

	row("os", text("", info.OS))
	row("arch", text("", info.Arch))
	row("hostname", text(FieldHostname, info.Hostname))
	row("chip", text(FieldChip, info.Chip))
	row("cpus", num(FieldCPUs, info.CPUs))
	pageSize := num(FieldPageSize, info.PageSize)
	if info.Known(FieldPageSize) {
		pageSize = fmt.Sprintf("%d KiB", info.PageSize/1024)
	}
	row("page size", pageSize)
	row("memory total", mem(FieldTotal, m.Total))
	row("memory available", mem(FieldAvailable, m.Available))
	row("host memory", mem(FieldHostTotal, m.HostTotal)+" total, "+mem(FieldHostAvailable, m.HostAvailable)+" available")
	if info.OS == "linux" {
		row("cgroup", cgroupCell(info))
	}
	if len(info.Accelerators) == 0 {
		if info.Known(FieldAccelerators) {
			row("accelerators", "none")
		} else {
			row("accelerators", "unknown")
		}
	}
	for i, a := range info.Accelerators {
		cell := a.Name + " (" + a.Kind + ")"
		if a.Device != "" {
			cell += " " + a.Device
		}
		switch {
		case a.SharedMemory:
			cell += ", shares system memory"
		case info.Known(AcceleratorMemoryField(i)):
			cell += ", " + api.FormatBytes(a.Memory)
		default:
			cell += ", memory unknown"
		}
		if v := a.versions(); v != "" {
			cell += ", " + v
		}
		row("accelerator", cell)
	}
	power := "not on battery"
	switch {
	case !info.Known(FieldOnBattery):
		power = "unknown"
	case info.OnBattery:
		power = "on battery"
	}
	row("power", power)
	if len(info.Unknown) > 0 {
		row("unknown", strings.Join(info.Unknown, ", "))
	}
	for _, n := range info.Notes {
		row("note", n)
	}
	return tw.Flush()
}

// cgroupCell describes the agent's cgroup in one cell.
func cgroupCell(info Info) string {
	m := info.Memory
	switch m.CgroupVersion {
	case 0:
		return "unknown"
	case 1:
		return "v1 memory controller: figures are the host's"
	}
	parts := []string{"v2 " + m.CgroupPath}
	switch {
	case !info.Known(FieldCgroupLimit):
		parts = append(parts, "limit unknown")
	case m.CgroupLimit == 0:
		parts = append(parts, "no limit")
	default:
		parts = append(parts, "limit "+api.FormatBytes(m.CgroupLimit)+" at "+m.CgroupLimitPath)
	}
	if info.Known(FieldCgroupHigh) && m.CgroupHigh > 0 {
		parts = append(parts, "high "+api.FormatBytes(m.CgroupHigh))
	}
	if info.Known(FieldCgroupCurrent) {
		parts = append(parts, "using "+api.FormatBytes(m.CgroupCurrent))
	}
	return strings.Join(parts, ", ")
}
