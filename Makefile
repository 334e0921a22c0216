# replicator — build, test and run targets. `make help` lists them.
GO        ?= go
BIN       ?= bin
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
PKGS      := ./...

.PHONY: help build plugins proto proto-check test lint fuzz bench demo clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build the replicator binary into ./bin
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/replicator ./cmd/replicator

plugins: ## build the first-party and example plugin binaries into ./bin/plugins
	@mkdir -p $(BIN)/plugins
	$(GO) build -o $(BIN)/plugins/replicator-store-commitlog ./plugins/commitlog/cmd/replicator-store-commitlog
	$(GO) build -o $(BIN)/plugins/replicator-metadata-files ./plugins/metadata/cmd/replicator-metadata-files
	$(GO) build -o $(BIN)/plugins/replicator-store-filestore ./examples/store-plugin

proto: ## regenerate sdk/proto (protoc 3.21 + protoc-gen-go v1.36.12 + protoc-gen-go-grpc v1.6.2)
	sdk/proto/gen.sh

proto-check: ## fail when committed generated code differs from a fresh generation
	sdk/proto/check.sh

test: ## run every test with the race detector (the README's test command)
	$(GO) test -race -count=1 -timeout 9m $(PKGS)

lint: ## gofmt must be clean; go vet must pass
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@if command -v protoc >/dev/null; then sdk/proto/check.sh; else echo "protoc not installed: proto check skipped"; fi

fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

bench: ## run the Go benchmarks (BENCHTIME, default 1s)
	REPLICATOR_BENCH_CATCHUP=1GiB $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

demo: build ## a master and a slave on this machine, replicating, with visible progress
	$(BIN)/replicator demo

clean: ## remove build output
	rm -rf $(BIN)
