package llamaserver

import "strings"

// engineEnvNames are the variables of the agent's own environment an engine may see: what any
// program needs to find its libraries and speak the user's language. Everything else stays
// with the agent: its environment carries the mesh secret (LLMKUBE_JOIN) and tokens, and an
// engine is a large third-party program that loads files from the network.
var engineEnvNames = map[string]bool{
	"PATH": true, "HOME": true, "USER": true, "LOGNAME": true, "TMPDIR": true, "TZ": true,
	"LANG": true, "LANGUAGE": true, "LD_LIBRARY_PATH": true, "DYLD_LIBRARY_PATH": true,
}

// engineEnvPrefixes are the families of variables llama.cpp and the GPU runtimes it links read
// (LLAMA_ARG_*, LLAMA_CACHE, GGML_*, CUDA_VISIBLE_DEVICES, ROCm's HIP_/HSA_/ROCR_, Vulkan's VK_)
// and the locale's LC_*.
var engineEnvPrefixes = []string{"LC_", "LLAMA_", "GGML_", "CUDA_", "HIP_", "HSA_", "ROCR_", "GPU_", "VK_"}

// secretPrefix names the agent's own variables (LLMKUBE_JOIN, LLMKUBE_TOKEN): never passed on,
// even when Config.Env names one.
const secretPrefix = "LLMKUBE_"

// engineEnv is the environment of an engine process: the allowed part of environ, then extra
// (Config.Env), which wins over it.
func engineEnv(environ, extra []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if engineEnvNames[name] || hasAnyPrefix(name, engineEnvPrefixes) {
			out = append(out, kv)
		}
	}
	for _, kv := range extra {
		if !strings.HasPrefix(kv, secretPrefix) {
			out = append(out, kv)
		}
	}
	return out
}

func hasAnyPrefix(s string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(s, p) {
			return true
		}
	}
	return false
}
