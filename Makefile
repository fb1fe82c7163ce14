# sortie — common tasks. `make help` lists them.
GO ?= go
PKGS ?= ./...

.PHONY: help test test-race test-short lint fmt bench examples

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

test: lint examples ## the whole suite with the race detector (what CI runs)
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	@# Under -race the counts test uses 100k rows; this run shows 1M rows.
	$(GO) test -count=1 -run 'TestCountsMillionRows' -v ./store/sqlitestore/

test-race: test ## same as test

test-short: ## the suite without the race detector, for a quick check
	$(GO) test -count=1 -timeout 15m $(PKGS)

lint: ## gofmt, go vet and staticcheck (pinned in go.mod as a tool)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

examples: ## build the runnable examples
	$(GO) build -o /dev/null ./examples/...

bench: ## sortie bench on every embedded store (medians of 3)
	$(GO) run ./cmd/sortie bench --store memory --workload all --repeat 3
	$(GO) run ./cmd/sortie bench --store sqlite --workload all --repeat 3
	$(GO) run ./cmd/sortie bench --store sqlite --synchronous normal --workload all --repeat 3
