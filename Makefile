# llmkube mesh — see README.md. Targets that cannot work yet fail with a message; none pretend.
GO       ?= go
BIN      ?= bin
PKGS     ?= ./...
GOFLAGS_TEST ?= -race -timeout 20m
LDFLAGS  ?= -s -w
PROGRAMS := llmkube-agent llmkube-tui hailo-sim llama-server-sim ollama-sim

.PHONY: all build test demo bench lint release clean fuzz

all: build

build:
	@mkdir -p $(BIN)
	@for p in $(PROGRAMS); do \
		if [ -d cmd/$$p ]; then $(GO) build -o $(BIN)/$$p ./cmd/$$p || exit 1; fi; \
	done

test: lint
	$(GO) test $(GOFLAGS_TEST) $(PKGS)

# A local mesh of simulated hosts (a Pi 5 with a Hailo-10H, a Mac-like host, a Linux box) and the console.
demo:
	$(GO) run ./cmd/llmkube-tui --demo

# Benchmarks; figures are recorded by hand in BENCHMARKS.md with the date, machine and method.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -count 1 $(PKGS)

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

# Static binaries for the platforms we run on.
release:
	@mkdir -p dist
	@for os_arch in linux/amd64 linux/arm64 darwin/arm64 darwin/amd64; do \
		os=$${os_arch%/*}; arch=$${os_arch#*/}; \
		for p in llmkube-agent llmkube-tui; do \
			[ -d cmd/$$p ] || continue; \
			CGO_ENABLED=0 GOOS=$$os GOARCH=$$arch $(GO) build -trimpath -ldflags "$(LDFLAGS)" -o dist/$$p-$$os-$$arch ./cmd/$$p || exit 1; \
		done; \
	done
	@ls -l dist

clean:
	rm -rf $(BIN) dist
