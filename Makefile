# agentic-host — the two commands a new machine needs are `make demo` and
# `make test`; everything else is for working on the project.

GO        ?= go
BIN       := bin/agentic-host
DEMO_DIR  := .demo
BENCHSTAT := golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da
# staticcheck 2026.2.2, the first release that reads Go 1.26; go run fetches
# it from the module proxy, pinned, so every machine lints alike.
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2
FUZZTIME  ?= 20s
BENCH_COUNT ?= 5
LOAD_SESSIONS ?= 1000
LOAD_ROUTE ?= 1000
LOAD_RATES ?= 200,500
LOAD_MODEL_RATE ?= 100
ROUTE_DIR ?= ../shared/bench/aisdk-route
ANCHOR_RUNS ?= 200
ANCHOR_DIR ?= ../shared/bench/aisdk
PKGS      := ./...
# make test starts the longest packages first, so that the short ones fill
# the time beside them rather than one long one running alone at the end,
# and builds or runs TEST_P test binaries at once: with 2, the two longest
# held both slots and the other packages were not even built until they
# ended (on 2 cores, the short packages then ran alone from 591 s to
# 771 s). The run's events are kept in bin/test.json.
TEST_FIRST := ./internal/cli ./plugins ./server ./host
TEST_P    ?= 3

SOAK      ?= 3m
# The version a release stamps: the tag at HEAD, else the last tag with
# what follows it (v0.3.0-4-gabcdef123456), else v0.0.0-devel-COMMIT.
# The previous release is the last v* tag, else (tags may not travel with
# the repository) the newest "## vX.Y.Z" section of CHANGELOG.md, on the
# commit that added it: see scripts/previous-release.sh.
VERSION   ?= $(shell ./scripts/previous-release.sh version)
DIST      ?= dist
# apidiff, pinned: make check compares the exported API with API_BASE's.
APIDIFF   := golang.org/x/exp/cmd/apidiff@v0.0.0-20261113113407-e3970619a1a4
API_BASE  ?= $(shell ./scripts/previous-release.sh commit)
# make upgrade-soak: the previous release (UPGRADE_FROM, a tag or commit;
# HEAD when there is none yet, its old hosts then announcing no ledger
# feature: UPGRADE_OLD_FEATURES) against this tree, for UPGRADE_SOAK.
UPGRADE_SOAK ?= 3m
UPGRADE_FROM ?= $(or $(shell ./scripts/previous-release.sh commit),HEAD)
UPGRADE_OLD_FEATURES ?= $(if $(shell ./scripts/previous-release.sh commit),,[])

.PHONY: all build release api-check demo test test-short soak soak-short upgrade-soak bench bench-anchor load examples lint fuzz check clean demo-chaos demo-restart demo-compaction demo-queue demo-task demo-approval demo-media demo-beforeafter

all: build

## build: compile the agentic-host binary into bin/
build:
	$(GO) build -o $(BIN) ./cmd/agentic-host

## release: agentic-host for linux and darwin on amd64 and arm64, VERSION stamped, into DIST (dist/): an archive and a CycloneDX SBOM per platform, and SHA256SUMS; then its test (reproducible, versioned, the SBOM's modules)
release:
	$(GO) run ./internal/cmd/release -version $(VERSION) -out $(DIST)
	cd $(DIST) && sha256sum -c SHA256SUMS
	AGENTIC_RELEASE_TEST=1 $(GO) test -count=1 -run '^TestReleaseOfThisMachine$$' ./internal/cmd/release

## demo: an offline chat (fake model, file storage) where the agent uses a Wasm tool, then its transcript
demo: build
	@rm -rf $(DEMO_DIR)
	@./scripts/plugin-toolchains.sh go >/dev/null
	@OUT=$(DEMO_DIR)/plugins ./scripts/build-plugins.sh get_account
	@echo '$$ agentic-host chat --offline --plugins $(DEMO_DIR)/plugins --storage file:$(DEMO_DIR) --session demo "Please get_account account_id=42 and tell me its plan."'
	@$(BIN) chat --offline --plugins $(DEMO_DIR)/plugins --storage file:$(DEMO_DIR) --session demo "Please get_account account_id=42 and tell me its plan."
	@echo
	@echo '$$ agentic-host transcript --storage file:$(DEMO_DIR) demo'
	@$(BIN) transcript --storage file:$(DEMO_DIR) demo

## demo-NAME: one offline demo each — chaos (injected faults, exact text), restart (SIGKILL mid-run, the next process resumes),
## compaction (a fact survives compactions), queue (a message sent mid-run joins it), task, approval, media,
## beforeafter (retries, persistence and resume written by hand, then the same on the host)
demo-chaos demo-restart demo-compaction demo-queue demo-task demo-approval demo-media demo-beforeafter: build
	@BIN=$(BIN) ./scripts/demo.sh $(@:demo-%=%)

## test: install what the tests need when missing, then vet and run every test with the race detector; the ten slowest tests, the five slowest packages and the run's time last
test:
	./scripts/test-deps.sh
	$(GO) vet $(PKGS)
	@mkdir -p bin
	$(GO) build -o bin/testsummary ./internal/cmd/testsummary
	bash -o pipefail -c '$(GO) test -race -count=1 -p $(TEST_P) -timeout 25m -json $(TEST_FIRST) $(PKGS) | tee bin/test.json | bin/testsummary'

## soak-short: the soak's first part alone (TestSoak) for 60 seconds: what .ci/run runs after make test
soak-short:
	./scripts/test-deps.sh
	AGENTIC_SOAK=60s AGENTIC_REQUIRE_REDIS=1 $(GO) test -count=1 -timeout 15m -run '^TestSoak$$' -v ./internal/cli

## upgrade-soak: UPGRADE_SOAK (3m) of a rolling deploy on a Redis Cluster under the soak's load: two serve processes of the previous release (UPGRADE_FROM) and two of this tree, the old ones replaced by new ones one by one, then two new ones by old ones, while sessions fork and approvals edit; fails on any message not answered exactly once
upgrade-soak:
	./scripts/test-deps.sh
	./scripts/build-at.sh $(UPGRADE_FROM) bin/agentic-host-previous $(shell ./scripts/previous-release.sh name)
	AGENTIC_UPGRADE_SOAK=$(UPGRADE_SOAK) AGENTIC_UPGRADE_OLD=$(CURDIR)/bin/agentic-host-previous AGENTIC_UPGRADE_OLD_FEATURES='$(UPGRADE_OLD_FEATURES)' \
		AGENTIC_REQUIRE_REDIS=1 $(GO) test -count=1 -timeout 30m -run '^TestUpgradeSoak$$' -v ./internal/cli

## soak: SOAK (3m) of three serve processes on a Redis Cluster (3 primaries, a replica each) under steady load, while serve processes are killed and paused and primaries fail over; fails on any message not answered exactly once. Then a durable plugin call SIGKILLed at every boundary on files, Redis and a Redis Cluster
soak:
	./scripts/test-deps.sh
	AGENTIC_SOAK=$(SOAK) AGENTIC_REQUIRE_REDIS=1 $(GO) test -count=1 -timeout 30m -run '^TestSoak$$' -v ./internal/cli
	AGENTIC_DURABLE_ALL=1 AGENTIC_REQUIRE_REDIS=1 $(GO) test -count=1 -timeout 30m -run '^TestDurableCallSIGKILL$$' ./plugins

## test-short: the fast tests only
test-short:
	$(GO) test -short -count=1 $(PKGS)

## bench: run the benchmarks BENCH_COUNT times, the anchor (when ANCHOR_DIR and node are there) and the recovery times, print medians (benchstat), then each hot path beside its comparison
bench: build
	@mkdir -p bin
	$(GO) test -run='^$$' -bench=. -benchmem -count=$(BENCH_COUNT) $(PKGS) | tee bin/bench.txt
	@if [ -f "$(ANCHOR_DIR)/bench.mjs" ] && command -v node >/dev/null; then \
		echo; echo "The host's CPU per model step beside the AI SDK's ($(ANCHOR_DIR)), 3 rounds:"; \
		BIN=$(BIN) ANCHOR_DIR=$(ANCHOR_DIR) ANCHOR_OUT=bin/anchor.txt ./scripts/bench-anchor.sh $(ANCHOR_RUNS) && cat bin/anchor.txt >>bin/bench.txt; \
	else \
		echo; echo "No AI SDK harness at $(ANCHOR_DIR) (ANCHOR_DIR) or no node: the step-CPU comparison is left out."; \
	fi
	@echo; echo "Recovery: from a host's SIGKILL mid-stream to the first resumed progress a reconnected client receives (TestRecoveryTime):"
	@./scripts/test-deps.sh
	@AGENTIC_RECOVERY=1 AGENTIC_REQUIRE_REDIS=1 $(GO) test -count=1 -timeout 20m -run '^TestRecoveryTime$$' -v ./internal/cli >bin/recovery.log 2>&1 || { tail -60 bin/recovery.log; exit 1; }
	@grep '^recovery' bin/recovery.log
	@echo
	@echo "Medians of $(BENCH_COUNT) runs:"
	$(GO) run $(BENCHSTAT) bin/bench.txt
	@echo
	@echo "The hot paths beside their comparisons (medians of $(BENCH_COUNT) runs; docs/performance.md):"
	@$(GO) run ./internal/cmd/benchsummary bin/bench.txt

## bench-anchor: the host's CPU per model step beside the AI SDK 7 ToolLoopAgent's (ANCHOR_DIR, ../shared/bench/aisdk), same fake server, same run
bench-anchor: build
	@BIN=$(BIN) ANCHOR_DIR=$(ANCHOR_DIR) ./scripts/bench-anchor.sh $(ANCHOR_RUNS)

## load: the service under load beside its peers (scripts/load.sh): the UI route's CPU per chat beside an AI SDK route's (ROUTE_DIR), two model servers; open-loop load at LOAD_RATES chats/s, the capacity and fairness; the capacity model (file and Redis); LOAD_SESSIONS (1000) sessions at once
load: build
	@mkdir -p bin
	$(GO) build -o bin/load ./internal/cmd/load
	BIN=$(BIN) ROUTE_DIR=$(ROUTE_DIR) LOAD_SESSIONS=$(LOAD_SESSIONS) LOAD_ROUTE=$(LOAD_ROUTE) LOAD_RATES=$(LOAD_RATES) LOAD_MODEL_RATE=$(LOAD_MODEL_RATE) ./scripts/load.sh

## examples: install the plugin toolchains when missing, build the example plugins into bin/plugins, and run every Example function (they are tests with checked output)
examples:
	./scripts/plugin-toolchains.sh
	./scripts/build-plugins.sh
	$(GO) test -count=1 -run='^Example' $(PKGS)

## lint: gofmt, go vet and staticcheck
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) run $(STATICCHECK) $(PKGS)

## fuzz: a short run (FUZZTIME each, 20s by default) of every native fuzzer, found in the test files
fuzz:
	GO=$(GO) FUZZTIME=$(FUZZTIME) ./scripts/fuzz.sh

## check: lint, go.mod tidy, the plugin kit built for wasip1, and the exported API against the last release (api-check)
check: lint api-check
	GOWORK=off $(GO) mod tidy -diff
	cd pdk && GOWORK=off GOOS=wasip1 GOARCH=wasm $(GO) build ./...

## api-check: the exported API's changes since API_BASE (the last release tag), incompatible ones failing; ACCEPT_API_BREAK=1 lists them without failing
api-check:
	@APIDIFF=$(APIDIFF) GO=$(GO) ./scripts/api-check.sh "$(API_BASE)"

clean:
	rm -rf bin $(DEMO_DIR) $(DIST)
