# replicator — build, test and run targets. `make help` lists them.
GO        ?= go
BIN       ?= bin
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
PKGS      := ./...

.PHONY: help build test lint fuzz bench demo clean

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

build: ## build the replicator binary into ./bin
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/replicator ./cmd/replicator

test: ## run every test with the race detector (the README's test command)
	$(GO) test -race -count=1 -timeout 9m $(PKGS)

lint: ## gofmt must be clean; go vet must pass
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

fuzz: ## run each fuzz target for FUZZTIME (default 30s)
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
	  for t in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | sed 's/^func //'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

bench: ## run the Go benchmarks (BENCHTIME, default 1s)
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

demo: build ## a master and a slave on this machine, replicating, with visible progress
	$(BIN)/replicator demo

clean: ## remove build output
	rm -rf $(BIN)
