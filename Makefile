# sortie — common tasks. `make help` lists them.
GO ?= go
PKGS ?= ./...

.PHONY: help test test-race test-short test-go-race test-go-short test-python lint fmt bench examples fuzz build install image

# The PostgreSQL tests (internal/testkit/pgtest) use the server in
# SORTIE_TEST_POSTGRES_URL. `scripts/testpg.sh run CMD` starts a throwaway one
# on 127.0.0.1 (installing the server with apt-get if missing and allowed),
# runs CMD with the URL set and stops it, so one server serves a whole
# `make test`. Without a server the PostgreSQL tests skip, except under
# CI=true, where they fail. To keep one server across repeated go test runs:
#   eval "$(scripts/testpg.sh start)"   # exports SORTIE_TEST_POSTGRES_URL
#   go test ./store/pgstore/             # (and make test uses it too)
#   scripts/testpg.sh stop
TESTPG = scripts/testpg.sh run
# The Redis tests (internal/testkit/redistest) use the standalone server in
# SORTIE_TEST_REDIS_URL and the cluster in SORTIE_TEST_REDIS_CLUSTER.
# `scripts/testredis.sh run CMD` starts a throwaway Redis and a throwaway
# Redis Cluster of three primaries on 127.0.0.1 (installing Redis 7+ with
# apt-get if missing and allowed), runs CMD with both named and stops them;
# after TESTPG, one PostgreSQL, one Redis and one cluster serve a whole
# `make test`. Without them the Redis tests skip, except under CI=true,
# where they fail. To keep them across repeated go test runs:
#   eval "$(scripts/testredis.sh start)"            # SORTIE_TEST_REDIS_URL
#   eval "$(scripts/testredis.sh start --cluster)"  # SORTIE_TEST_REDIS_CLUSTER
#   go test ./store/redisstore/
#   eval "$(scripts/testredis.sh stop)"             # stops both
TESTREDIS = scripts/testredis.sh run
# The dashboard's browser test (web) drives headless Chromium through
# chromedriver; scripts/testbrowser.sh installs them with apt-get when missing
# and allowed. Without them that test skips, except under CI=true.

# Integrations in modules of their own, so that the main module does not
# depend on what they integrate (contrib/otel: OpenTelemetry). Each requires
# sortie through a replace of ../.., so it builds against this checkout.
# lint, test and test-short check them too, each from its own directory:
# ./... at the root stops at a directory holding another go.mod. CONTRIB=
# leaves them out.
CONTRIB ?= contrib/otel
# contrib runs a command in the directory of each module of CONTRIB.
contrib = for m in $(CONTRIB); do echo "(cd $$m && $(1))"; (cd $$m && $(1)) || exit 1; done

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

# The fuzz targets run for TEST_FUZZTIME each as part of test: every
# parser of outside input meets new inputs on every run. It is a count of
# inputs, not a duration: with a duration, Go before 1.27 can fail a target
# with a bare "context deadline exceeded" when the time runs out while a
# worker is busy (golang/go#75804), which a loaded CI machine hits. A count
# has no deadline to race; load only makes it slower.
TEST_FUZZTIME ?= 600x

test: lint examples ## the whole suite with the race detector, then each fuzz target briefly (what CI runs)
	scripts/testbrowser.sh
	$(TESTPG) $(TESTREDIS) $(MAKE) --no-print-directory test-go-race
	$(MAKE) --no-print-directory test-python
	$(MAKE) --no-print-directory fuzz FUZZTIME=$(TEST_FUZZTIME)

test-race: test ## same as test

test-short: ## the suite without the race detector, for a quick check
	$(TESTPG) $(TESTREDIS) $(MAKE) --no-print-directory test-go-short
	$(MAKE) --no-print-directory test-python

# test-go-race and test-go-short are what test and test-short run with the
# PostgreSQL and Redis servers up; run on their own, they use
# SORTIE_TEST_POSTGRES_URL, SORTIE_TEST_REDIS_URL and SORTIE_TEST_REDIS_CLUSTER.
test-go-race:
	$(GO) test -race -count=1 -timeout 30m $(PKGS)
	@$(call contrib,$(GO) test -race -count=1 -timeout 10m ./...)
	@# Under -race the counts test uses 100k rows; this run shows 1M rows.
	$(GO) test -count=1 -run 'TestCountsMillionRows' -v ./store/sqlitestore/

test-go-short:
	$(GO) test -count=1 -timeout 15m $(PKGS)
	@$(call contrib,$(GO) test -count=1 -timeout 10m ./...)

# test-python runs the tests of the Python client (clients/python, standard
# library only) against a sortie built for them. Without python3 they skip
# with a loud message, except under CI=true, where they fail.
test-python: ## the Python client's tests, against a freshly built sortie
	@if ! command -v python3 >/dev/null 2>&1; then \
		if [ "$$CI" = true ]; then echo "python3 is not installed: the Python client cannot be tested (CI=true)"; exit 1; fi; \
		echo "SKIPPED: python3 is not installed, so the Python client (clients/python) is not tested"; exit 0; \
	fi; \
	bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && \
	$(GO) build -o "$$bin/sortie" ./cmd/sortie && \
	SORTIE_BIN="$$bin/sortie" python3 -m unittest discover -s clients/python/tests -v

lint: ## gofmt, go vet and staticcheck (pinned in go.mod as a tool)
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt would change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) tool staticcheck $(PKGS)
	@# staticcheck is pinned in the main module only: built from it (the
	@# build cache keeps this quick), it runs in each contrib module.
	@bin=$$(mktemp -d) && trap 'rm -rf "$$bin"' EXIT && \
	$(GO) build -o "$$bin/staticcheck" honnef.co/go/tools/cmd/staticcheck && \
	$(call contrib,$(GO) vet ./... && "$$bin/staticcheck" ./...)

fmt: ## format the code
	gofmt -w $$(git ls-files '*.go')

# fuzz runs every fuzz target of the module (func FuzzXxx in any package's
# tests, found with go test -list) for FUZZTIME each. An input that fails is
# written to the package's testdata/fuzz/FuzzXxx and runs with go test from
# then on: commit it with the fix. FUZZTIME is a duration (10s) or a count
# of inputs (600x); see TEST_FUZZTIME for why test uses a count.
FUZZTIME ?= 10s

fuzz: ## run each fuzz target for FUZZTIME (default 10s)
	@set -e; for dir in $$($(GO) list -f '{{.Dir}}' $(PKGS)); do \
		grep -qs '^func Fuzz' $$dir/*_test.go || continue; \
		for target in $$($(GO) test -list 'Fuzz.*' $$dir | grep '^Fuzz'); do \
			echo "== $$target ($${dir#$(CURDIR)/}, $(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) $$dir; \
		done; \
	done

# build and install stamp the binary with its commit (sortie version), even
# where GOFLAGS turns -buildvcs off.
build: ## build bin/sortie from this clone
	$(GO) build -buildvcs=true -trimpath -o bin/sortie ./cmd/sortie

install: ## install sortie into $(go env GOBIN) or ~/go/bin from this clone
	$(GO) install -buildvcs=true -trimpath ./cmd/sortie

# image builds deploy/Containerfile with docker, or podman where docker is
# missing; it fails, saying so, when neither runs here.
IMAGE ?= sortie:latest
image: ## build the container image (deploy/Containerfile) with docker or podman
	@tool=$$(for t in docker podman; do command -v $$t >/dev/null && $$t info >/dev/null 2>&1 && { echo $$t; break; }; done); \
	if [ -z "$$tool" ]; then echo "make image: neither docker nor podman can build here (missing, or no daemon running)"; exit 1; fi; \
	echo "$$tool build -f deploy/Containerfile -t $(IMAGE) ."; $$tool build -f deploy/Containerfile -t $(IMAGE) .

examples: ## build the runnable examples
	$(GO) build -o /dev/null ./examples/...

# screenshots refreshes the dashboard's screenshots in docs/screenshots from
# the browser test's (every page at 1400 and 390 px over ~500 jobs).
SCREENSHOTS = overview-1400 jobs-1400 job-workflow-1400 running-1400 dead-390
.PHONY: screenshots
screenshots: ## the dashboard's screenshots of docs/screenshots, taken again
	scripts/testbrowser.sh
	@dir=$$(mktemp -d) && trap 'rm -rf "$$dir"' EXIT && \
	SORTIE_SCREENSHOTS=$$dir $(GO) test -count=1 -run 'TestEveryPageInBrowser' ./web/ && \
	mkdir -p docs/screenshots && for s in $(SCREENSHOTS); do cp "$$dir/$$s.png" docs/screenshots/; done

.PHONY: dashboard-10m
dashboard-10m: ## every dashboard page timed in Chromium over 10M finished jobs, SQLite and PostgreSQL
	SORTIE_DASHBOARD_ROWS=10000000 $(TESTPG) $(GO) test -count=1 -run 'TestDashboardBigTable' -v -timeout 60m ./web/

.PHONY: drain-delay
drain-delay: ## drain PostgreSQL and Redis through a proxy at 0, 1 and 5 ms round trip, 3 interleaved rounds (docs/scaling.md)
	SORTIE_DELAY_JOBS=10000 $(TESTPG) $(TESTREDIS) $(GO) test -count=1 -run 'TestDrainOverDelay' -v -timeout 60m ./bench/

.PHONY: drain-hosts
drain-hosts: ## drain across 1, 2, 4 and 8 worker hosts (network namespaces, as root) at 0.2, 1 and 5 ms round trip, PostgreSQL and Redis
	SORTIE_HOSTS_JOBS=20000 $(TESTPG) $(TESTREDIS) $(GO) test -count=1 -run 'TestDrainAcrossHosts' -v -timeout 60m ./cmd/sortie/internal/cli/

.PHONY: drain-hosts-river
drain-hosts-river: ## sortie against River draining one PostgreSQL from 4 worker hosts at 0.2, 1 and 5 ms, 3 interleaved rounds (root)
	$(TESTPG) sh -c 'cd bench/peers && SORTIE_HOSTS_ROUNDS=3 SORTIE_HOSTS_JOBS=30000 $(GO) test -count=1 -run TestDrainAcrossHostsAgainstRiver -v -timeout 60m .'

.PHONY: migrate-1m
migrate-1m: ## a million jobs moved SQLite -> PostgreSQL with sortie's export and import, each step timed
	SORTIE_MIGRATE_JOBS=1000000 $(TESTPG) $(GO) test -count=1 -run 'TestExportImportScale' -v -timeout 30m .

# soak holds SOAK_RATE jobs/s for SOAK_DURATION on SQLite, then on
# PostgreSQL, printing a line per 5-minute window (docs/scaling.md).
SOAK_RATE ?= 3000
SOAK_DURATION ?= 30m
.PHONY: soak
soak: ## a steady mix of jobs for 30 minutes on SQLite and on PostgreSQL, each window reported
	$(GO) build -o bin/sortie ./cmd/sortie
	rm -f bin/soak.db bin/soak.db-wal bin/soak.db-shm && bin/sortie migrate --store bin/soak.db
	bin/sortie soak --store bin/soak.db --rate $(SOAK_RATE) --duration $(SOAK_DURATION)
	$(TESTPG) sh -c 'bin/sortie migrate --store "$$SORTIE_TEST_POSTGRES_URL" --schema soak && \
		bin/sortie soak --store "$$SORTIE_TEST_POSTGRES_URL" --schema soak --rate $(SOAK_RATE) --duration $(SOAK_DURATION)'

.PHONY: pg-bigtable
pg-bigtable: ## PostgreSQL fetch and counts with 10M finished rows (docs/scaling.md)
	SORTIE_PG_BIGTABLE_ROWS=10000000 $(TESTPG) $(GO) test -count=1 -run 'TestBigTable' -v -timeout 60m ./store/pgstore/

# chaos runs the long form of the fault scenarios of cmd/sortie/internal/chaos (kill -9
# storms, database restarts, SIGSTOP fencing, a full disk, Stop during an
# outage, API load; on Redis also power cuts, eviction, no append-only file,
# a full server, lost replies and a failover and back) on every store, with the servers of
# scripts/testpg.sh and scripts/testredis.sh, and prints their counts; docs/chaos.md says what each
# asserts. make test runs the short form with the rest of the suite. The
# disk-full scenarios mount a small tmpfs, which takes root.
.PHONY: chaos
chaos: ## the fault scenarios, long form: kill -9 storms, restarts, full disk, Redis power cuts... (docs/chaos.md)
	$(TESTPG) $(TESTREDIS) env SORTIE_CHAOS=long $(GO) test -count=1 -v -timeout 90m ./cmd/sortie/internal/chaos/

bench: ## sortie bench on every embedded store (medians of 3)
	$(GO) run ./cmd/sortie bench --store memory --workload all --repeat 3
	$(GO) run ./cmd/sortie bench --store sqlite --workload all --repeat 3
	$(GO) run ./cmd/sortie bench --store sqlite --synchronous normal --workload all --repeat 3
