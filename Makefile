# idemflow: `make demo` runs the example worker, `make test` runs every test.
# Everything needed is installed here, idempotently: the wasm32 target, the
# wasm-bindgen CLI at exactly the crate's version, binaryen's wasm-opt and npm packages.

SHELL := /bin/bash
CARGO_BIN := $(HOME)/.cargo/bin
export PATH := $(CARGO_BIN):$(PATH)

WASM_BINDGEN_VERSION := $(shell sed -n 's/^wasm-bindgen = "=\([^"]*\)"/\1/p' Cargo.toml)
WASM := target/wasm32-unknown-unknown/release/idemflow.wasm
VERSION := $(shell sed -n 's/^version = "\([^"]*\)"/\1/p' Cargo.toml | head -n 1)
TARBALL := target/npm/idemflow-$(VERSION).tgz
SOURCES := $(shell find src js -type f) Cargo.toml Cargo.lock pkg.json README.md scripts/assemble-pkg.cjs CHANGELOG.md LICENSE-MIT LICENSE-APACHE

.PHONY: all tools pkg test lint test-native test-wasm test-js test-fuzz fuzz examples demo bench clean faults kafka-broker kafka-chaos

all: pkg

tools:
	@rustup target list --installed | grep -qx wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
	@if [ "$$(wasm-bindgen --version 2>/dev/null)" != "wasm-bindgen $(WASM_BINDGEN_VERSION)" ]; then \
	  echo "installing wasm-bindgen-cli $(WASM_BINDGEN_VERSION) (a few minutes, once)"; \
	  cargo install wasm-bindgen-cli --version $(WASM_BINDGEN_VERSION) --force; \
	fi

# wasm-opt from binaryen's npm package at exactly this version, installed
# once into target/tools (the stamp names the version, so a new pin reinstalls).
BINARYEN_VERSION := 132.0.0
WASM_OPT := target/tools/node_modules/.bin/wasm-opt
BINARYEN_STAMP := target/tools/binaryen-$(BINARYEN_VERSION).installed

$(BINARYEN_STAMP):
	rm -f target/tools/binaryen-*.installed
	npm install --prefix target/tools --no-audit --no-fund --loglevel=error --save-exact binaryen@$(BINARYEN_VERSION)
	touch $@

# Biome formats and lints the JavaScript (biome.json), installed like wasm-opt.
BIOME_VERSION := 2.6.8
BIOME := target/tools/node_modules/.bin/biome
BIOME_STAMP := target/tools/biome-$(BIOME_VERSION).installed

$(BIOME_STAMP):
	rm -f target/tools/biome-*.installed
	npm install --prefix target/tools --no-audit --no-fund --loglevel=error --save-exact @biomejs/biome@$(BIOME_VERSION)
	touch $@

# Formatting and lints, Rust and JavaScript: `make test` runs it first, so a
# change that breaks them fails CI. `cargo fmt` and `$(BIOME) check --write .`
# fix what they report.
lint: tools $(BIOME_STAMP)
	cargo fmt --check
	cd fuzz && cargo fmt --check
	cargo clippy --all-targets -- -D warnings
	cargo clippy --target wasm32-unknown-unknown --all-targets -- -D warnings
	$(BIOME) check --error-on-warnings .
	node scripts/unused-exports.cjs

pkg: tools $(TARBALL)

# wasm-opt also drops the producers and target_features sections: nothing reads them at run time.
$(TARBALL): $(SOURCES) $(BINARYEN_STAMP)
	cargo build --release --target wasm32-unknown-unknown
	rm -rf pkg && mkdir -p pkg/wasm target/npm
	wasm-bindgen --target nodejs --out-dir pkg/wasm --out-name idemflow $(WASM)
	$(WASM_OPT) -O3 --strip-producers --strip-target-features pkg/wasm/idemflow_bg.wasm -o pkg/wasm/idemflow_bg.wasm
	node scripts/assemble-pkg.cjs . pkg
	rm -f target/npm/idemflow-*.tgz
	cd pkg && npm pack --silent --pack-destination ../target/npm >/dev/null
	@ls -l $(TARBALL)

# The JS test project installs the packed package as a user would.
tests/js/node_modules/.installed: tests/js/package.json $(TARBALL)
	cd tests/js && npm install --no-audit --no-fund --loglevel=error
	cd tests/js && npm install --no-audit --no-fund --no-save --loglevel=error ../../$(TARBALL)
	touch $@

test: lint test-native test-wasm test-js test-fuzz

test-native:
	cargo test

test-wasm: tools
	CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUNNER=wasm-bindgen-test-runner cargo test --target wasm32-unknown-unknown

# The broker chaos test runs the example workers: test-js copies them first.
test-js: pkg tests/js/node_modules/.installed examples
	cd tests/js && npx --no-install tsc -p tsconfig.json
	cd tests/js && node --test --test-concurrency=1 test/*.test.mjs test/*.test.cjs

# Fuzzing (fuzz/, its own crate, cargo-fuzz on nightly): a few seconds per
# target in `make test`, skipped with one line without nightly; `make fuzz`
# is the long campaign (FUZZ_SECONDS per target, FUZZ_TARGETS to choose).
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?= validate decide ruleset json outbox payload

test-fuzz:
	fuzz/run.sh 5

fuzz:
	fuzz/run.sh $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The long fault campaign: throwaway PostgreSQL 15 and MariaDB servers of its
# own, many faults and deliveries through processEvent workers and through
# processBatch workers (with SIGKILLs), the figures printed (make test runs a slice).
faults: pkg tests/js/node_modules/.installed
	cd tests/js && node workers/fault-campaign.mjs

# Examples import 'idemflow' by name, so they run from the test project that installed it.
examples: pkg tests/js/node_modules/.installed
	rm -rf tests/js/examples && cp -r js/examples tests/js/examples

DEMOS := deposit-demo consumer-demo shipments-demo
BENCHES := decide adapters batch production brokers kafka startup http

demo: examples
	@set -e; for demo in $(DEMOS); do echo "== examples/$$demo.mjs"; (cd tests/js && node examples/$$demo.mjs); echo; done

bench: examples
	@set -e; for bench in $(BENCHES); do echo "== bench/$$bench.mjs"; (cd tests/js && node bench/$$bench.mjs); echo; done

clean:
	rm -rf pkg target/npm tests/js/node_modules

# A longer reorder-safety campaign than the 4,000 cases per store of `make test`.
.PHONY: reorder-campaign soak
reorder-campaign: pkg tests/js/node_modules/.installed
	cd tests/js && IDEMFLOW_REORDER_RUNS=$${IDEMFLOW_REORDER_RUNS:-200000} node --test test/reorder.test.mjs

# The heavy multi-process, broker and property tests at the sizes `make test`
# slices down to stay within its time budget (about half an hour more).
soak: examples
	cd tests/js && IDEMFLOW_CONCURRENCY_DELIVERIES=20000 IDEMFLOW_CONCURRENCY_WORKFLOWS=500 IDEMFLOW_CHAOS_SWAPS=1000 \
	  IDEMFLOW_REORDER_RUNS=10000 IDEMFLOW_REORDER_DEPOSITS_RUNS=5000 IDEMFLOW_MIGRATE_LIVE_EVENTS=4000 \
	  node --test --test-concurrency=1 test/concurrency.test.mjs test/brokers.test.mjs test/reorder.test.mjs test/migrate-live.test.mjs

# The Kafka-protocol broker of the Kafka tests and bench: Tansu 0.6.0 (scripts/kafka-broker.sh),
# installed once into ~/.cache/idemflow and started on 127.0.0.1:19092 unless something answers
# there. The tests find it through IDEMFLOW_KAFKA_BROKERS=127.0.0.1:19092 (.ci/run sets it).
kafka-broker:
	scripts/kafka-broker.sh start

# A longer Kafka chaos run than the one of `make test`: more swaps, more worker kills.
KAFKA_CHAOS_SWAPS ?= 5000
KAFKA_CHAOS_KILLS ?= 20
kafka-chaos: examples kafka-broker
	cd tests/js && IDEMFLOW_KAFKA_BROKERS=$${IDEMFLOW_KAFKA_BROKERS:-127.0.0.1:19092} IDEMFLOW_CHAOS_BROKERS=kafka \
	  IDEMFLOW_CHAOS_SWAPS=$(KAFKA_CHAOS_SWAPS) IDEMFLOW_CHAOS_WORKER_KILLS=$(KAFKA_CHAOS_KILLS) IDEMFLOW_CHAOS_DRAIN_MS=1200000 \
	  node --test test/brokers.test.mjs
