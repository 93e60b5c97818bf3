# Cairn. `make run` starts a single dev node; `make test` installs, builds, lints and tests.
SHELL := /bin/bash
.DEFAULT_GOAL := build
NPM_STAMP := node_modules/.cairn-install-stamp
SEEDS ?= 10000
TAP_JOBS ?= 2

.PHONY: install build proto check-gen lint test test-unit sim sim-demo run clean bench bench-watch bench-scale

$(NPM_STAMP): package.json package-lock.json
	@command -v node >/dev/null || { echo "node (20 or newer) is required" >&2; exit 1; }
	@# `npm install` (not `npm ci`): npm 11 leaves other platforms' optional packages
	@# (msgpackr-extract's) out of the lock and then refuses `npm ci`; install still honours
	@# the locked versions.
	npm install --no-audit --no-fund
	npx tap build
	@touch $@

install: $(NPM_STAMP)

build: $(NPM_STAMP)
	npx tsc -p tsconfig.json
	@mkdir -p dist/src/gen && cp src/gen/*.js dist/src/gen/

# Regenerate src/gen from proto/ (the output is committed).
proto: $(NPM_STAMP)
	bash scripts/gen-proto.sh

# Check that src/gen is exactly what `make proto` generates from proto/ (also a test in `make
# test`: scripts/check-gen.test.mjs).
check-gen: $(NPM_STAMP)
	node scripts/check-gen.mjs

lint: build
	node scripts/check-architecture.mjs

# Everything CI runs: lint, the container files, the real-process cluster tests (one file at a
# time), the fault harness's short suite and root-only tests (test-jepsen: needs root and network
# namespaces, fails without them unless CAIRN_SKIP_JEPSEN=1), then unit, transcript, property,
# simulation (a CI-sized swarm), storage, API and agent tests, ending with a plain summary line.
test: lint compose-check
	@$(MAKE) --no-print-directory test-cluster
	@$(MAKE) --no-print-directory test-jepsen
	@bash scripts/run-tests.sh

test-unit: build
	@bash scripts/run-tests.sh

# A long deterministic-simulation swarm: make sim SEEDS=10000
sim: build
	node dist/cluster-test/sim/cli.js swarm --seeds $(SEEDS)

# A single node with embedded defaults: bootstraps itself, registers the demo types, keeps
# its data in ./cairn-data, serves gRPC on 127.0.0.1:7500 and HTTP on 127.0.0.1:7501, and runs
# the built-in streaming controllers (--controllers, as production deployments do).
run: build
	node bin/cairn agent --dev --controllers

# The simulator's narrated demo run (elections, partitions, crashes, snapshots).
sim-demo: build
	node dist/cluster-test/sim/cli.js demo

# The watch fan-out benchmark (bench/README.md): one real node, 200 writes/s, 100 / 1,000 /
# 10,000 gRPC watchers and 100 HTTP ones; about 4 minutes, QUICK=1 under 2. A program, not a
# test: never part of `make test`. Writes bench/results/watch-fanout-<date>[-quick].{json,svg}.
bench-watch: build
	QUICK=$(QUICK) node dist/bench/watch-fanout.js

clean:
	rm -rf dist

# Cairn side by side with etcd (bench/README.md): installs etcd from Debian's etcd-server
# package if it is absent, then runs a 3-node etcd cluster and a 3-node Cairn cluster on
# loopback one after the other, three times each in alternating order (--repeat), prints one
# table of medians with their spread and the Cairn/etcd ratios, and writes
# bench/results/bench-<date>-<HHMM>.json and .svg. About 20 minutes; QUICK=1 runs shorter windows
# and two runs per system (about 6 minutes). BENCH_ARGS passes more flags (--only cas-leader-64, --repeat 5, ...).
bench: build
	@bash bench/install-etcd.sh
	@bash bench/install-nft.sh
	node dist/bench/compare.js $(if $(filter 1 true yes,$(QUICK)),--quick) $(BENCH_ARGS)

# The scale of the data (bench/README.md, "bench-scale"): for 10k, 100k and 1M resources of 256
# bytes, Cairn and etcd each on a fresh 3-node cluster: load rate, memory per resource, snapshot
# time and size, a follower's restart to ready, a new member's catch-up. Installs etcd (and
# etcdctl) first if absent. Prints a table per measure with the Cairn/etcd ratios and the issue's
# targets at 1M; writes bench/results/scale-<date>-<HHMM>[-quick].{json,svg}. About 25 minutes
# on 2 cores (the 1M loads take most of it); QUICK=1 runs 10k and 100k only (about 4 minutes).
# SCALE_ARGS passes more flags (--scales 10000,100000, --systems cairn, --keep, --dir PATH).
# A program, not a test: never part of `make test`.
bench-scale: build
	@bash bench/install-etcd.sh
	node dist/bench/scale.js $(if $(filter 1 true yes,$(QUICK)),--quick) $(SCALE_ARGS)

# ---- A local cluster, the real-process cluster tests, the container files (deploy/README.md) ----
N ?= 3

.PHONY: cluster cluster-stop test-cluster compose-check

# N local nodes (1 to 5) as background processes: node K serves gRPC on 127.0.0.1:75K0 and HTTP
# on 127.0.0.1:75K1, data/log/pid under .cluster/. Waits for a leader, prints where everything
# is. ARGS adds agent flags (ARGS="--tick-ms 50"); FRESH=1 deletes the old data first.
cluster: build
	@bash scripts/cluster.sh start $(N) $(ARGS)

# SIGTERM every node of `make cluster`, SIGKILL after STOP_GRACE seconds (default 15). Data stays.
cluster-stop:
	@bash scripts/cluster.sh stop

# The real-process cluster tests (cluster-test/cluster), one file at a time: about 3 minutes.
test-cluster: build
	@bash scripts/test-cluster.sh

# docker-compose.yml and the Dockerfile, checked without a Docker engine: `docker compose config`
# if the docker CLI has Compose v2, else docker-compose 1.29 (Debian's package, installed here
# when missing), plus Cairn's own rules and a self-test (scripts/compose-check.mjs).
compose-check: build
	@if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "compose-check: installing Debian's docker-compose (it validates compose files without an engine)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose >/dev/null || exit 1; \
	  else \
	    echo "compose-check: needs 'docker compose' (Compose v2) or docker-compose; as root, make installs Debian's docker-compose" >&2; exit 2; \
	  fi; \
	fi
	@node scripts/compose-check.mjs --self-test

# ---- The Jepsen-style fault harness (cluster-test/jepsen/README.md); needs root -----------------
# Real `cairn agent` processes in network namespaces, faults from a printed seed, histories
# checked (linearizability, set). Installs nftables if absent. Results under
# cluster-test/jepsen/results/.
#
# make cluster-test: a suite. One run per nemesis (a fresh cluster, that nemesis alone, every
# workload at once), then all nemeses together; TIME is the suite's total workload time in
# seconds, split evenly (at least 10 s a run). suite.txt / suite.json / suite.html sum it up;
# the exit code is non-zero if any run is invalid.
#   make cluster-test TIME=600 NEMESIS=all          the long suite (NEMESIS: all or a list)
#   make cluster-test SEED=42 NODES=5 WORKLOAD=register PLANTED_BUGS=stale-follower-read
# make cluster-test-run: one run, every listed nemesis mixed, TIME seconds.
TIME ?= 120
NEMESIS ?= all
WORKLOAD ?= all
NODES ?= 3
SEED ?=
PLANTED_BUGS ?=
JEPSEN_FLAGS = --nodes $(NODES) --time $(TIME) --nemesis $(NEMESIS) --workload $(WORKLOAD) $(if $(SEED),--seed $(SEED)) $(if $(PLANTED_BUGS),--planted-bugs $(PLANTED_BUGS))

.PHONY: cluster-test cluster-test-run cluster-test-selftest cluster-test-clean test-jepsen

cluster-test: build
	@bash cluster-test/jepsen/setup.sh
	node dist/cluster-test/jepsen/run.js --suite $(JEPSEN_FLAGS)

cluster-test-run: build
	@bash cluster-test/jepsen/setup.sh
	node dist/cluster-test/jepsen/run.js $(JEPSEN_FLAGS)

# The harness's own tests that need root (*.netns-test.js, one file at a time): partitions cut
# and heal traffic (every partition shape drops exactly its pairs; membership and transfer
# nemeses on real agents), a 20 s run is linearizable, a crashed harness is cleaned up after, and each
# planted bug is caught through the harness (with it invalid, without it valid). About 3 minutes.
cluster-test-selftest: build
	@bash cluster-test/jepsen/setup.sh
	npx tap --jobs=1 $$(find dist/cluster-test/jepsen -name '*.netns-test.js' | sort)

# CI's part (in `make test`, scripts/test-jepsen.sh): setup, a short suite (every nemesis alone
# for JEPSEN_RUN_TIME=10 s, then all together, every workload, 3 nodes), then the selftests;
# about 4 minutes. Fails when root or network namespaces are missing; CAIRN_SKIP_JEPSEN=1 skips.
test-jepsen: build
	@bash scripts/test-jepsen.sh

# Removes what a crashed harness left behind (namespaces cairn-j*, links cj*, their agents);
# every run also does this first.
cluster-test-clean: build
	node dist/cluster-test/jepsen/run.js --cleanup
