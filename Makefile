# replicator — build, test and run targets. `make help` lists them.
GO        ?= go
BIN       ?= bin
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
PKGS      := ./...

.PHONY: demo-failover help build plugins proto proto-check test lint fuzz faults docs-check bench bench-full demo clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build the replicator binary into ./bin
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/replicator ./cmd/replicator

plugins: ## build the first-party and example plugin binaries into ./bin/plugins
	@mkdir -p $(BIN)/plugins
	$(GO) build -o $(BIN)/plugins/replicator-store-commitlog ./plugins/commitlog/cmd/replicator-store-commitlog
	$(GO) build -o $(BIN)/plugins/replicator-metadata-files ./plugins/metadata/cmd/replicator-metadata-files
	$(GO) build -o $(BIN)/plugins/replicator-transport-tcp ./plugins/transport-tcp/cmd/replicator-transport-tcp
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

faults: ## the long fault suite: 60 master kills x 3 seeds, slave kills, network and disk faults, controller mode (6 faults x 51 cycles) (tens of minutes)
	@mkdir -p $(BIN); rc=0; REPLICATOR_FAULTS=long $(GO) test -count=1 -timeout 80m -v ./faults/ >$(BIN)/faults.log 2>&1 || rc=$$?; \
	  grep -E -- '--- |RESULT|^(ok|FAIL)' $(BIN)/faults.log; echo "full log: $(BIN)/faults.log"; exit $$rc

docs-check: build ## run every ```sh block of the docs and scrape a live master and slave for the metric names
	REPLICATOR_DOCS_CHECK=1 $(GO) test -count=1 -timeout 20m ./docs/docscheck/

bench: build plugins ## Go benchmarks (BENCHTIME, default 1s), then `replicator bench` (one run per scenario)
	REPLICATOR_BENCH_CATCHUP=1GiB $(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)
	$(BIN)/replicator --plugins $(BIN)/plugins bench --runs 1

bench-full: ## the figures of docs/benchmarks.md: replicator bench (3 runs, both stores), 4 GiB catch-up, peer anchors (~40 min)
	docs/bench/run.sh

demo: build ## a master and a slave on this machine, replicating, with visible progress
	$(BIN)/replicator demo

demo-failover: build ## controller mode: a controller and three nodes, the master killed, the election, the rejoin
	$(BIN)/replicator demo --failover

clean: ## remove build output
	rm -rf $(BIN)
