package tuitest

import (
	"time"

	"github.com/llmkube/mesh/agent/api"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// SampleMesh is a realistic four-agent mesh seen from a console at now: a Raspberry Pi 5 with a
// Hailo-10H running hailo-ollama (qwen2:1.5b ready), a Mac mini with llama-server (one model
// ready, one pulling at 42%), a Linux tower with Ollama (one model ready, one loading), and a
// Pi 4 that has turned suspect. Views' golden tests render it, so what users see is checked
// against a picture that looks like a real LAN rather than an empty one.
func SampleMesh(now time.Time) api.MeshView {
	started := now.Add(-26 * time.Hour)
	pi5 := api.Member{
		Name: "pi5", Role: api.RoleAgent, Addr: "192.168.1.21:7946", Liveness: api.Alive, Updated: now.Add(-time.Second),
		Host: &api.Host{
			Name: "pi5", Hostname: "pi5", OS: "linux", Arch: "arm64", Chip: "Raspberry Pi 5 Model B (BCM2712)",
			CPUs: 4, PageSize: 16384,
			Memory:       api.Memory{Total: 8 * gib, Available: 6*gib + 300*mib, Budget: 5488 * mib, Committed: 0},
			Accelerators: []api.Accelerator{{Kind: "hailo", Name: "Hailo-10H", Device: "/dev/hailo0", Memory: 8 * gib, Loaded: "qwen2:1.5b"}},
			Engines: []api.Engine{
				{Runtime: api.RuntimeLlamaServer, Detail: "llama-server not found on PATH: install llama.cpp or pass --llama-server"},
				{Runtime: api.RuntimeOllama, Detail: "nothing answers on 127.0.0.1:11434"},
				{Runtime: api.RuntimeHailoOllama, Present: true, Healthy: true, Address: "127.0.0.1:8000", Version: "5.1.1",
					Models: []string{"deepseek_r1:1.5b", "llama3.2:1b", "qwen2:1.5b", "qwen2.5-coder:1.5b", "qwen2.5-instruct:1.5b"}},
			},
			Placements: 1, APIAddr: "192.168.1.21:7777", Version: "0.1.0", StartedAt: started, Generation: 14,
		},
		Placements: []api.Placement{{
			ID: "p-7f3a9c", Host: "pi5", Model: "qwen2:1.5b", Source: "hailo://qwen2:1.5b", Runtime: api.RuntimeHailoOllama,
			Namespace: "default", Context: 2048, Priority: api.PriorityNormal, State: api.StateReady,
			Memory:    api.SizeEstimate{Bytes: 1946 * mib, Method: api.SizeHead, Device: api.DeviceHailo, Detail: "HEF blob 1.9 GiB (HEAD Content-Length)"},
			CreatedAt: now.Add(-2 * time.Hour), UpdatedAt: now.Add(-2 * time.Hour), LastUsed: now.Add(-3 * time.Minute),
			TTFTMillis: 320, TokensPerS: 8.2, LogPath: "/var/lib/llmkube/agent/logs/hailo-ollama.log", Engine: "127.0.0.1:8000",
		}},
	}
	mac := api.Member{
		Name: "mac-mini", Role: api.RoleAgent, Addr: "192.168.1.30:7946", Liveness: api.Alive, Updated: now.Add(-time.Second),
		Host: &api.Host{
			Name: "mac-mini", Hostname: "Mac-mini.local", OS: "darwin", Arch: "arm64", Chip: "Apple M2 Pro", CPUs: 10,
			PageSize:     16384,
			Memory:       api.Memory{Total: 32 * gib, Available: 17 * gib, Budget: 21954 * mib, Committed: 4812 * mib, Reserved: 5734 * mib},
			Accelerators: []api.Accelerator{{Kind: "metal", Name: "Apple M2 Pro", Memory: 32 * gib}},
			Engines: []api.Engine{
				{Runtime: api.RuntimeLlamaServer, Present: true, Healthy: true, Address: "/opt/homebrew/bin/llama-server", Version: "b4589"},
				{Runtime: api.RuntimeOllama, Detail: "nothing answers on 127.0.0.1:11434"},
				{Runtime: api.RuntimeHailoOllama, Detail: "no Hailo device"},
			},
			Placements: 2, APIAddr: "192.168.1.30:7777", Version: "0.1.0", StartedAt: started, Generation: 31,
		},
		Placements: []api.Placement{
			{
				ID: "p-1b2c3d", Host: "mac-mini", Model: "qwen2.5-coder-7b", Source: "hf://Qwen/Qwen2.5-Coder-7B-Instruct-GGUF/qwen2.5-coder-7b-instruct-q4_k_m.gguf",
				Runtime: api.RuntimeLlamaServer, Namespace: "default", Context: 8192, Priority: api.PriorityHigh, State: api.StateReady,
				Memory:    api.SizeEstimate{Bytes: 4812 * mib, Weights: 4460 * mib, KV: 224 * mib, Compute: 96 * mib, Overhead: 32 * mib, Method: api.SizeHeader, Device: api.DeviceHost},
				CreatedAt: now.Add(-5 * time.Hour), UpdatedAt: now.Add(-5 * time.Hour), LastUsed: now.Add(-40 * time.Second),
				TTFTMillis: 145, TokensPerS: 38.5, LogPath: "/Users/ana/Library/Application Support/llmkube/agent/logs/p-1b2c3d.log", Engine: "127.0.0.1:52011",
			},
			{
				ID: "p-9e8d7c", Host: "mac-mini", Model: "llama-3.1-8b-instruct", Source: "hf://bartowski/Meta-Llama-3.1-8B-Instruct-GGUF/Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
				Runtime: api.RuntimeLlamaServer, Namespace: "team-a", Context: 4096, Priority: api.PriorityNormal, State: api.StatePulling,
				Progress: 0.42, PulledBytes: 2058 * mib, TotalBytes: 4900 * mib,
				Memory:    api.SizeEstimate{Bytes: 5734 * mib, Weights: 4900 * mib, KV: 512 * mib, Compute: 258 * mib, Overhead: 64 * mib, Method: api.SizeHeader, Device: api.DeviceHost},
				CreatedAt: now.Add(-time.Minute), UpdatedAt: now.Add(-time.Second),
			},
		},
	}
	tower := api.Member{
		Name: "tower", Role: api.RoleAgent, Addr: "192.168.1.40:7946", Liveness: api.Alive, Updated: now.Add(-2 * time.Second),
		Host: &api.Host{
			Name: "tower", Hostname: "tower", OS: "linux", Arch: "amd64", Chip: "AMD Ryzen 7 5800X", CPUs: 16, PageSize: 4096,
			Memory: api.Memory{Total: 24 * gib, Available: 14 * gib, Budget: 16466 * mib, Committed: 2355 * mib, Reserved: 4506 * mib, CgroupLimit: 24 * gib},
			Engines: []api.Engine{
				{Runtime: api.RuntimeLlamaServer, Detail: "not selected (--runtimes ollama)"},
				{Runtime: api.RuntimeOllama, Present: true, Healthy: true, Address: "127.0.0.1:11434", Version: "0.5.7",
					Models: []string{"llama3.2:3b", "mistral:7b", "nomic-embed-text:latest"}},
				{Runtime: api.RuntimeHailoOllama, Detail: "no Hailo device"},
			},
			Namespaces: []string{"default", "team-a"},
			Placements: 2, APIAddr: "192.168.1.40:7777", Version: "0.1.0", StartedAt: started, Generation: 9,
			Unknown: []string{"chip temperature"},
		},
		Placements: []api.Placement{
			{
				ID: "p-4d5e6f", Host: "tower", Model: "llama3.2:3b", Source: "ollama://llama3.2:3b", Runtime: api.RuntimeOllama,
				Namespace: "default", Context: 2048, Priority: api.PriorityNormal, State: api.StateReady,
				Memory:    api.SizeEstimate{Bytes: 2355 * mib, Method: api.SizeShow, Device: api.DeviceHost},
				CreatedAt: now.Add(-26 * time.Hour), UpdatedAt: now.Add(-26 * time.Hour), LastUsed: now.Add(-2 * time.Hour),
				TTFTMillis: 210, TokensPerS: 24.1, Engine: "127.0.0.1:11434",
			},
			{
				ID: "p-0a1b2c", Host: "tower", Model: "mistral:7b", Source: "ollama://mistral:7b", Runtime: api.RuntimeOllama,
				Namespace: "team-a", Context: 4096, Priority: api.PriorityLow, State: api.StateLoading,
				Memory:    api.SizeEstimate{Bytes: 4506 * mib, Method: api.SizeShow, Device: api.DeviceHost},
				CreatedAt: now.Add(-20 * time.Second), UpdatedAt: now.Add(-3 * time.Second), Engine: "127.0.0.1:11434",
			},
		},
	}
	pi4 := api.Member{
		Name: "pi4", Role: api.RoleAgent, Addr: "192.168.1.22:7946", Liveness: api.Suspect, Reason: "no ack to 3 probes",
		Updated: now.Add(-9 * time.Second),
		Host: &api.Host{
			Name: "pi4", Hostname: "pi4", OS: "linux", Arch: "arm64", Chip: "Raspberry Pi 4 Model B", CPUs: 4, PageSize: 4096,
			Memory:     api.Memory{Total: 4 * gib, Available: 2 * gib, Budget: 2744 * mib, Committed: 700 * mib},
			Engines:    []api.Engine{{Runtime: api.RuntimeLlamaServer, Present: true, Healthy: true, Address: "/usr/local/bin/llama-server", Version: "b4589"}},
			Placements: 1, APIAddr: "192.168.1.22:7777", Version: "0.1.0", StartedAt: started, Generation: 5,
		},
		Placements: []api.Placement{{
			ID: "p-3c4d5e", Host: "pi4", Model: "tinyllama-1.1b", Source: "/srv/models/tinyllama-1.1b-chat.Q4_K_M.gguf",
			Runtime: api.RuntimeLlamaServer, Namespace: "default", Context: 2048, Priority: api.PriorityBatch, State: api.StateUnavailable,
			Reason:    "host is suspect",
			Memory:    api.SizeEstimate{Bytes: 700 * mib, Method: api.SizeHeader, Device: api.DeviceHost},
			CreatedAt: now.Add(-24 * time.Hour), UpdatedAt: now.Add(-9 * time.Second), LastUsed: now.Add(-4 * time.Hour),
			TTFTMillis: 900, TokensPerS: 6.3,
		}},
	}
	laptop := api.Member{Name: "laptop", Role: api.RoleConsole, Addr: "192.168.1.50:7946", Liveness: api.Alive, Updated: now}
	return api.MeshView{Mesh: "home", Self: "laptop", Members: []api.Member{pi5, mac, tower, pi4, laptop}, At: now}
}

// SampleEvents are the events a console of SampleMesh would have seen, oldest first.
func SampleEvents(now time.Time) []api.Event {
	ev := func(ago time.Duration, typ, host, msg string, code api.Code) api.Event {
		return api.Event{Time: now.Add(-ago), Type: typ, Host: host, Message: msg, Code: code}
	}
	out := []api.Event{
		ev(2*time.Hour+10*time.Second, api.EventPlacement, "pi5", "qwen2:1.5b pulling", ""),
		ev(2*time.Hour, api.EventPlacement, "pi5", "qwen2:1.5b ready on hailo-ollama", ""),
		ev(30*time.Minute, api.EventEngine, "tower", "ollama: present=true healthy=true", ""),
		ev(5*time.Minute, api.EventRefused, "pi5", "hailo://qwen2.5-coder:1.5b: namespace team-b not allowed", api.CodeNamespaceNotAllow),
		ev(4*time.Minute, api.EventDeleted, "mac-mini", "phi-3-mini deleted", ""),
		// A mesh event is published by the member that saw it (Host) about another (Member).
		{Time: now.Add(-90 * time.Second), Type: api.EventMesh, Host: "tower", Member: "pi4", Message: "suspect: no ack to 3 probes"},
		ev(time.Minute, api.EventPlacement, "mac-mini", "llama-3.1-8b-instruct sizing: 5.6 GiB by header", ""),
		ev(50*time.Second, api.EventPlacement, "mac-mini", "llama-3.1-8b-instruct pulling 10%", ""),
		ev(20*time.Second, api.EventPlacement, "tower", "mistral:7b loading", ""),
		ev(5*time.Second, api.EventPlacement, "mac-mini", "llama-3.1-8b-instruct pulling 42%", ""),
	}
	for i := range out {
		out[i].Seq = uint64(i + 1)
	}
	return out
}
