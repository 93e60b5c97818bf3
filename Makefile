# Cairn. `make run` starts a single dev node; `make test` installs, builds, lints and tests.
SHELL := /bin/bash
.DEFAULT_GOAL := build
NPM_STAMP := node_modules/.cairn-install-stamp
SEEDS ?= 10000
TAP_JOBS ?= 2

.PHONY: install build proto lint test test-unit sim sim-demo run clean

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

lint: build
	node scripts/check-architecture.mjs

# Unit, transcript, property and simulation tests (a CI-sized swarm), then a plain summary line.
test: lint
	@bash scripts/run-tests.sh

test-unit: build
	@bash scripts/run-tests.sh

# A long deterministic-simulation swarm: make sim SEEDS=10000
sim: build
	node dist/cluster-test/sim/cli.js swarm --seeds $(SEEDS)

# A single node with embedded defaults: bootstraps itself, registers the demo types, keeps
# its data in ./cairn-data, serves gRPC on 127.0.0.1:7500 and HTTP on 127.0.0.1:7501.
run: build
	node bin/cairn agent --dev

# The simulator's narrated demo run (elections, partitions, crashes, snapshots).
sim-demo: build
	node dist/cluster-test/sim/cli.js demo

clean:
	rm -rf dist
