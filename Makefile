# llmkube mesh — see README.md. Targets that cannot work yet fail with a message; none pretend.
GO       ?= go
BIN      ?= bin
PKGS     ?= ./...
GOFLAGS_TEST ?= -race -timeout 20m
PROGRAMS := llmkube-agent llmkube-tui llmkube-demo hailo-sim llama-server-sim ollama-sim
PLATFORMS ?= linux/amd64 linux/arm64 darwin/arm64 darwin/amd64

# The build's version: the nearest v* tag without its v (v1.2.3 -> 1.2.3, 1.2.3-4-gabc… after it),
# else 0.0.0-<commit>; -dirty when the work tree has changes. The date is the commit's, in UTC, so
# the same commit builds the same archives.
VERSION ?= $(shell v=$$(git describe --tags --match 'v[0-9]*' --dirty 2>/dev/null) && echo $${v\#v} || \
	echo 0.0.0-$$(git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$$(git diff --quiet HEAD 2>/dev/null || echo -dirty))
COMMIT  ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git show -s --format=%ct HEAD 2>/dev/null || echo 0)
DATE    ?= $(shell TZ=UTC git show -s --format=%cd --date=format-local:%Y-%m-%dT%H:%M:%SZ HEAD 2>/dev/null)
VPKG    := github.com/llmkube/mesh/version
STAMP   := -X $(VPKG).Version=$(VERSION) -X $(VPKG).Commit=$(COMMIT) -X $(VPKG).Date=$(DATE)
LDFLAGS ?= -s -w

.PHONY: all build test e2e demo bench bench-split bench-compare lint release release-check clean

all: build

build:
	@mkdir -p $(BIN)
	@for p in $(PROGRAMS); do \
		if [ -d cmd/$$p ]; then $(GO) build -ldflags "$(STAMP)" -o $(BIN)/$$p ./cmd/$$p || exit 1; fi; \
	done

# The memberlist fork is a module of its own, outside ./...: its upstream tests run too, with
# the fork's (third_party/memberlist/LLMKUBE.md).
test: lint
	$(GO) test $(GOFLAGS_TEST) $(PKGS)
	cd third_party/memberlist && $(GO) vet ./... && $(GO) test $(GOFLAGS_TEST) -count=1 ./...

# The mesh on a LAN of network namespaces: the real programs on four hosts, mDNS and no seeds,
# faults (see e2e/). Needs root (CI runs it so); elsewhere it skips, saying why. The report of
# every step's timing is printed and written to $(E2E_REPORT).
E2E_REPORT ?= $(CURDIR)/$(BIN)/e2e-report.txt
e2e:
	@mkdir -p $(dir $(E2E_REPORT))
	LLMKUBE_E2E=1 LLMKUBE_E2E_REPORT=$(E2E_REPORT) $(GO) test -count=1 -timeout 12m -v -run '^TestLAN' ./e2e/

# A local mesh of simulated hosts (a Pi 5 with a Hailo-10H, a Mac-like host, a Linux box) and the console.
# Built, then run by exec: no `go run` or shell stays between the terminal and the demo, so
# closing the terminal hangs up the demo itself, which stops its mesh and removes its folders.
demo:
	@mkdir -p $(BIN)
	@test -x $(BIN)/llmkube-demo || echo "building llmkube-demo (first run ≈ 2 min)…"
	@$(GO) build -o $(BIN)/llmkube-demo ./cmd/llmkube-demo
	@exec $(BIN)/llmkube-demo

# Benchmarks; figures are recorded by hand in BENCHMARKS.md with the date, machine and method.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(PKGS)
	@$(MAKE) --no-print-directory bench-split

# A model split across two hosts of a LAN of namespaces, their link 1 Gbit/s with 0.3 ms each
# way (LLMKUBE_E2E_LINK_DELAY=0: none): tokens/s and first token through the sealed channel,
# beside bare llama.cpp RPC, the same through two plain and two TLS relays, and one host
# running the whole model (issue 43, BENCHMARKS.md), ~3 min; it holds 4 GiB first so that no run
# computes on slower memory (LLMKUBE_E2E_SPLIT_BALLAST=0: not). Needs root and the real llama-server and
# ggml-rpc-server (../shared/engines or LLMKUBE_LLAMA_SERVER); without them the test skips and
# says why. The report ends with the table, also written to $(E2E_REPORT).split-speed.
bench-split:
	@mkdir -p $(dir $(E2E_REPORT))
	LLMKUBE_E2E=1 LLMKUBE_E2E_REPORT=$(E2E_REPORT) $(GO) test -count=1 -timeout 10m -v -run '^TestSpeedLANSplit$$' ./e2e/

# What one and two agents add to a chat beside the engine reached directly, engines paced at 200
# tokens/s, against issue 41's targets (per token, first token, 64 concurrent streams), then the
# idle agent beside a bare memberlist node (BENCHMARKS.md).
bench-compare:
	$(GO) test -run '^$$' -bench '^BenchmarkCompare$$' -benchtime 1x -count 1 ./agent/gateway/
	$(GO) run ./cmd/llmkube-agent/internal/footprint -idle 30s

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Static binaries for the platforms we run on, stamped with the version, one archive per platform
# (llmkube_<version>_<os>_<arch>.tar.gz: both programs, README.md, LICENSE) and SHA256SUMS, in dist/.
release:
	@rm -rf dist && mkdir -p dist
	@set -e; for os_arch in $(PLATFORMS); do \
		os=$${os_arch%/*}; arch=$${os_arch#*/}; name=llmkube_$(VERSION)_$${os}_$${arch}; \
		mkdir -p dist/$$name; \
		for p in llmkube-agent llmkube-tui; do \
			CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS) $(STAMP)" -o dist/$$name/$$p ./cmd/$$p; \
		done; \
		cp README.md LICENSE dist/$$name/; \
		tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@$(SOURCE_DATE_EPOCH) -C dist -cf - $$name | gzip -n > dist/$$name.tar.gz; \
		rm -rf dist/$$name; \
	done
	@cd dist && sha256sum *.tar.gz > SHA256SUMS && cat SHA256SUMS

# The linux/arm64 release agent under qemu-aarch64 (Debian's qemu-user): it runs, says its version,
# and probes a recorded Raspberry Pi 5 with a Hailo-10H. `make release` first for all platforms;
# alone it builds only that archive.
release-check:
	@[ -f dist/llmkube_$(VERSION)_linux_arm64.tar.gz ] || $(MAKE) --no-print-directory release PLATFORMS=linux/arm64
	@command -v qemu-aarch64 >/dev/null || { echo "release-check: qemu-aarch64 is not installed (apt-get install qemu-user)"; exit 1; }
	@set -e; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
		(cd dist && sha256sum -c --ignore-missing SHA256SUMS); \
		tar -xzf dist/llmkube_$(VERSION)_linux_arm64.tar.gz -C "$$tmp"; \
		d="$$tmp/llmkube_$(VERSION)_linux_arm64"; ls "$$d/LICENSE" "$$d/README.md" >/dev/null; \
		v=$$(qemu-aarch64 "$$d/llmkube-agent" --version); echo "$$v"; \
		case "$$v" in "llmkube-agent $(VERSION) ("*"linux/arm64") ;; *) echo "release-check: unexpected version line"; exit 1 ;; esac; \
		[ "$$v" = "$$(qemu-aarch64 "$$d/llmkube-agent" version)" ] || { echo "release-check: --version and version disagree"; exit 1; }; \
		qemu-aarch64 "$$d/llmkube-tui" --version | grep -q "llmkube-tui $(VERSION) (" || { echo "release-check: llmkube-tui version"; exit 1; }; \
		qemu-aarch64 "$$d/llmkube-agent" probe-host --json --root hwprobe/testdata/pi5-hailo --os linux --arch arm64 > "$$tmp/probe.json"; \
		grep -q '"Hailo-10H"' "$$tmp/probe.json" && grep -q 'Raspberry Pi 5' "$$tmp/probe.json" || { echo "release-check: the Pi 5 probe:"; cat "$$tmp/probe.json"; exit 1; }; \
		echo "release-check: linux/arm64 build runs under qemu, says $(VERSION), probes a Pi 5 with a Hailo-10H"

clean:
	rm -rf $(BIN) dist
