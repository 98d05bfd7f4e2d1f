package e2e

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/llmkube/mesh/agent/api"
	"github.com/llmkube/mesh/internal/netnslab"
	"github.com/llmkube/mesh/internal/seal"
)

// sealClients lets the run's own HTTP clients reach the agents over the sealed channel, as the
// console does: a console leaf derived from the join string, every agent checked against the
// mesh's CA. Calls to an agent on its own host's loopback stay plain.
func (e *env) sealClients(t *testing.T, hosts ...*netHost) {
	j, err := api.ParseJoin(e.join)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := seal.NewCA(j.MeshID, j.Secret)
	if err != nil {
		t.Fatal(err)
	}
	k, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	id, err := ca.Identity("e2e", seal.RoleConsole, k)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range hosts {
		h.HTTP.Transport.(*http.Transport).TLSClientConfig = id.ClientConfig(seal.Peer{})
	}
}

// capture records every frame that crosses the LAN's bridge: a packet socket in the hub's
// namespace, bound to no interface, sees each frame on the host ports it enters and leaves by.
type capture struct {
	f    *os.File
	done chan struct{}
	mu   sync.Mutex
	buf  bytes.Buffer
	api  int // TCP payload bytes to or from the API port
}

// maxCapture bounds what a capture keeps; the check's traffic is a few megabytes.
const maxCapture = 256 << 20

func startCapture(ns string) (*capture, error) {
	// The socket is made on a thread that entered the hub's namespace, and stays there.
	var fd int
	err := netnslab.Enter(ns, func() (err error) {
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("a packet socket in %s: %w", ns, err)
	}
	c := &capture{f: os.NewFile(uintptr(fd), "capture"), done: make(chan struct{})}
	go c.run()
	return c, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *capture) run() {
	defer close(c.done)
	frame := make([]byte, 1<<16)
	for {
		n, err := c.f.Read(frame)
		if err != nil {
			return
		}
		c.mu.Lock()
		if c.buf.Len() < maxCapture {
			c.buf.Write(frame[:n])
		}
		c.api += apiPayload(frame[:n])
		c.mu.Unlock()
	}
}

// apiPayload is the TCP payload length of an IPv4 Ethernet frame to or from the API port.
func apiPayload(f []byte) int {
	if len(f) < 14+20 || binary.BigEndian.Uint16(f[12:14]) != 0x0800 {
		return 0
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if ip[9] != unix.IPPROTO_TCP || len(ip) < ihl+20 || total > len(ip) {
		return 0
	}
	tcp := ip[ihl:total]
	if binary.BigEndian.Uint16(tcp[0:2]) != apiPort && binary.BigEndian.Uint16(tcp[2:4]) != apiPort {
		return 0
	}
	return len(tcp) - int(tcp[12]>>4)*4
}

// stop ends the capture and returns what crossed the bridge and the API traffic's size.
func (c *capture) stop() ([]byte, int) {
	c.f.Close()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.buf.Bytes(), c.api
}

// sealPrompt is a prompt no other check sends, so finding it means this check's chat leaked.
const sealPrompt = "Tell the sealed channel canary 7c1f9e a story."

// checkSealed: with a capture on the LAN's bridge, a model is placed, chats go through another
// host's gateway (OpenAI's route from the laptop, and the console's chat), `mesh hosts` and the
// doctor run. Nothing captured holds a prompt, an answer or a token: every byte between the
// programs crossed the sealed channel. A plain request from the LAN is refused, saying why.
func checkSealed(ctx context.Context, t *testing.T, e *env, n note) {
	j, err := api.ParseJoin(e.join)
	if err != nil {
		t.Fatal(err)
	}
	team, err := api.NamespaceToken(e.admin, teamNS)
	if err != nil {
		t.Fatal(err)
	}
	c, err := startCapture(e.lab.hub)
	if err != nil {
		t.Fatal(err)
	}
	var secrets []string // what must not be found
	answers := 0
	// A plain request sent on purpose, with a token no one holds: the capture must find it, or it
	// could not have found a leak either. The listener answers it itself, before any handler.
	const canary = "plain-canary-3b8d0c51e7"
	var plainCode int
	var plainBody []byte
	func() {
		defer func() {
			frames, apiBytes := c.stop()
			n("captured %d bytes on the bridge, %d of them TCP payload on the API port", len(frames), apiBytes)
			if apiBytes < 4096 || !bytes.Contains(frames, []byte(canary)) {
				t.Errorf("the capture saw %d bytes of API traffic and not the plain canary: it did not watch the LAN", apiBytes)
			}
			for _, s := range secrets {
				if s != "" && bytes.Contains(frames, []byte(s)) {
					t.Errorf("%.40q… crossed the LAN in the clear", s)
				}
			}
			n("%d secret strings looked for (prompts, %d answers, tokens, the mesh secret's hex), none found", len(secrets), answers)
		}()
		secrets = append(secrets, sealPrompt, e.admin, team, e.join, fmt.Sprintf("%x", j.Secret), "Say something about meshes")

		r := e.mesh(ctx, "place", "file://"+filepath.Join(e.x86.Dir, "gguf", "sim-1b.gguf"), "--host", e.x86.Name, "--name", "sealed-1b", "--wait", "--timeout", "60s", "--json")
		if r.code != 0 {
			t.Errorf("placing while captured: %s", r)
		}
		for _, stream := range []bool{false, true} {
			ch := e.chat(ctx, e.box, e.admin, llamaModel, stream, 8, nil)
			if !ch.ok() {
				t.Errorf("chat through box (stream %v): %s", stream, ch)
				continue
			}
			secrets = append(secrets, ch.content)
			answers++
		}
		r = e.mesh(ctx, "chat", llamaModel, sealPrompt, "--json", "--timeout", "30s")
		if r.code != 0 || !strings.Contains(r.stdout, `"done":true`) {
			t.Errorf("mesh chat while captured: %s", r)
		}
		var answer strings.Builder // the answer's text, as the console printed it (a JSON line per piece)
		for _, line := range strings.Split(r.stdout, "\n") {
			var piece struct{ Delta string }
			if json.Unmarshal([]byte(line), &piece) == nil {
				answer.WriteString(piece.Delta)
			}
		}
		if answer.Len() < 12 {
			t.Errorf("mesh chat printed no answer to look for: %s", r)
		} else {
			secrets = append(secrets, answer.String())
			answers++
		}
		if r := e.mesh(ctx, "hosts", "--json"); r.code != 0 {
			t.Errorf("mesh hosts while captured: %s", r)
		}
		if _, r, err := e.doctorFindings(ctx); err != nil {
			t.Errorf("the doctor while captured: %v %s", err, r)
		}
		if r := e.mesh(ctx, "delete", "sealed-1b", "--json"); r.code != 0 {
			t.Errorf("deleting the capture's placement: %s", r)
		}
		plainCode, plainBody, err = e.laptop.get(ctx, fmt.Sprintf("http://%s:%d/v1/host", e.box.Addr, apiPort), canary)
		if err != nil {
			t.Errorf("plain HTTP from the laptop to box: %v", err)
		}
	}()
	// Plain HTTP from the LAN reaches no handler: the listener itself says to use TLS.
	if plainCode != http.StatusUpgradeRequired || !strings.Contains(string(plainBody), "llmkube-agent ca") {
		t.Errorf("plain HTTP from the laptop to box: %d %s", plainCode, plainBody)
	}
	n("a plain request from the LAN was answered %d", plainCode)
}

// writeCA writes the mesh's CA certificate, as `llmkube-agent ca` prints it on the laptop, to
// path: what a token holder without the join string is given.
func (e *env) writeCA(ctx context.Context, path string) error {
	out, stderr, code, err := e.laptop.run(ctx, []string{"LLMKUBE_JOIN=" + e.join}, e.prog("llmkube-agent"), "ca")
	if err != nil || code != 0 || !strings.HasPrefix(out, "-----BEGIN CERTIFICATE-----") {
		return fmt.Errorf("llmkube-agent ca: exit %d %v %s", code, err, stderr)
	}
	return os.WriteFile(path, []byte(out), 0o644)
}
