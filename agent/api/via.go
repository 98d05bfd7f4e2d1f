package api

// HostHeader names the mesh host an API call is for. An agent that receives a call for another
// host forwards it to that host's API, with the caller's own token (the host checks it again),
// and streams the answer back: a console that reaches one agent (--agent URL, across a subnet)
// acts on the whole mesh through it.
const HostHeader = "X-Llmkube-Host"

// ViaHeader marks an API call an agent forwarded, with that agent's name: it is forwarded no
// further.
const ViaHeader = "X-Llmkube-Via"
