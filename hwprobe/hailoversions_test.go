package hwprobe

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The recorded hosts: a Pi on Raspberry Pi OS's 5.1.1 packages, one on Hailo's 5.3.0, and one
// upgraded to 5.3.0 whose device still runs the 5.1.1 firmware (not rebooted).
func TestHailoVersionsFromRecordedHosts(t *testing.T) {
	for _, c := range []struct {
		fixture, driver, firmware, runtime, skew string
	}{
		{"pi5-hailo-511", "5.1.1", "5.1.1", "5.1.1", ""},
		{"pi5-hailo-530", "5.3.0", "5.3.0", "5.3.0", ""},
		{"pi5-hailo-skewed", "5.3.0", "5.1.1", "5.3.0", "Hailo versions disagree: driver 5.3.0, firmware 5.1.1, runtime 5.3.0"},
	} {
		info := Probe(t.Context(), Options{Root: "testdata/" + c.fixture, OS: "linux", Arch: "arm64"})
		require.Len(t, info.Accelerators, 1, c.fixture)
		a := info.Accelerators[0]
		assert.Equal(t, "Hailo-10H", a.Name, c.fixture)
		assert.Equal(t, c.driver, a.Driver, c.fixture)
		assert.Equal(t, c.firmware, a.Firmware, c.fixture)
		assert.Equal(t, []string{c.runtime}, a.Runtimes, c.fixture)
		assert.Equal(t, c.skew, a.Skew(), c.fixture)
		if c.skew != "" {
			assert.Contains(t, info.Notes, "/dev/hailo0: "+c.skew, c.fixture)
		}
	}
	// The older fixture exposes no versions: nothing is claimed.
	info := Probe(t.Context(), Options{Root: "testdata/pi5-hailo", OS: "linux", Arch: "arm64"})
	assert.Empty(t, info.Accelerators[0].Driver+info.Accelerators[0].Firmware)
	assert.Empty(t, info.Accelerators[0].Skew())
}

func TestParseIdentify(t *testing.T) {
	v, err := parseIdentify([]byte("Executing on device: 0000:3c:00.0\nIdentifying board\nControl Protocol Version: 2\nFirmware Version: 5.2.0 (release,app)\nLogger Version: 0\nDevice Architecture: HAILO10H\n"))
	require.NoError(t, err)
	assert.Equal(t, "5.2.0", v)
	_, err = parseIdentify([]byte("[HailoRT] [error] CHECK failed - Driver version (5.3.0) is different from library version (5.1.1)\n"))
	assert.ErrorContains(t, err, "no Firmware Version line")
}

func TestSkew(t *testing.T) {
	assert.Empty(t, Accelerator{Driver: "5.3.0", Runtimes: []string{"5.3.0"}}.Skew(), "an unread firmware is no disagreement")
	assert.Equal(t, "Hailo versions disagree: driver 5.3.0, runtime 5.1.1", Accelerator{Driver: "5.3.0", Runtimes: []string{"5.1.1"}}.Skew())
	assert.Contains(t, Accelerator{Driver: "5.3.0", Runtimes: []string{"5.1.1", "5.3.0"}}.Skew(), "several HailoRT libraries are installed (libhailort 5.1.1, 5.3.0)")
}
