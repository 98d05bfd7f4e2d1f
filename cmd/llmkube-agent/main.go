// Command llmkube-agent turns a host into a member of an llmkube mesh: it probes the host,
// admits, pulls, loads and supervises models on its engines (llama-server, Ollama,
// hailo-ollama), joins the mesh and serves the agent API.
//
//	llmkube-agent init [--mesh-id ID]        make a mesh secret; print the join string and admin token
//	llmkube-agent run [flags]                run the agent
//	llmkube-agent probe-host [--json]        what this host has
//	llmkube-agent probe URL [--json]         how an engine answers the routes the drivers use
//	llmkube-agent join JOIN-STRING [flags]   install the agent as a user service, start it, wait until it joined
//	llmkube-agent leave [--purge]            stop it (it leaves the mesh gracefully) and remove the service
//	llmkube-agent service print|install      the systemd unit or launchd plist that runs it
//	llmkube-agent version
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
