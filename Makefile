# Ringmaster — top-level entry points. `make demo` and `make test` work on a
# fresh Debian 12 machine as root: both install what they need first.
BUILD ?= build
TRACE ?= data/traces/philly.csv
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all deps configure build install package test test-unit test-integration test-e2e test-browser test-sanitize fuzz bench demo cli-docs clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# The binaries, systemd units, docs and example configs under $(PREFIX)
# (DESTDIR=/staging/root to stage them elsewhere); docs/install.md.
install: build
	DESTDIR=$(DESTDIR) cmake --install $(BUILD) --prefix $(PREFIX)

# Debian packages (ringmaster, ringmaster-torch) in $(BUILD)/packages; docs/install.md.
package: build
	cd $(BUILD) && cpack

# Every test: unit, integration, e2e and browser (CTest labels).
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 300

test-unit: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L unit

test-integration: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L integration

test-e2e: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L e2e

# The dashboard in headless Chromium (docs/dashboard.md); RM_UPDATE_SCREENSHOTS=1 refreshes docs/screenshots/.
test-browser: build
	ctest --test-dir $(BUILD) --output-on-failure -L browser

# The server, store, HTTP, agent and ringcomm tests under AddressSanitizer
# with UBSan (the ringmaster binary too: the agent tests run tasks through its
# shim), then ringcomm's threaded tests under ThreadSanitizer. Not in CI (slow).
SANITIZE_ENV = RINGCOMM_TEST_BIG_COUNT=20011 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ASAN_TESTS = s3_store_test blob_store_contract_test files_api_test common_test store_test http_test protocol_test job_service_test server_test \
             agent_unit_test process_executor_test agent_test comm_unit_test comm_test
test-sanitize: deps
	cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRM_SANITIZE=address
	cmake --build build-asan -j $(JOBS) --target ringmaster $(ASAN_TESTS)
	# The contract suite's s3 cases run against a Ceph RGW of their own.
	set -e; bash tests/fixtures/ceph.sh up build-asan/fixtures/ceph > /dev/null; \
	trap 'bash tests/fixtures/ceph.sh down build-asan/fixtures/ceph' EXIT; \
	for t in $(ASAN_TESTS); do \
	  echo "== $$t (ASan+UBSan)"; RM_TEST_S3_URL_FILE=build-asan/fixtures/ceph/s3.url $(SANITIZE_ENV) \
	    $$(find build-asan/src -name $$t -type f -executable | head -1); \
	done
	cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DRM_SANITIZE=thread
	cmake --build build-tsan -j $(JOBS) --target comm_test
	# TSan cannot follow a multi-threaded parent into fork()ed ranks: the
	# forked tests run under ASan above; TSan checks every threaded test.
	RINGCOMM_TEST_BIG_COUNT=20011 TSAN_OPTIONS=halt_on_error=1 build-tsan/src/comm/comm_test \
	  --gtest_filter=-Processes/*:Transports/FaultTest.*

# libFuzzer (clang, ASan+UBSan) on every fuzz target for FUZZ_SECONDS each
# (default 60); see scripts/fuzz.sh. Findings become tests/fuzz/regressions.
fuzz: deps
	bash scripts/fuzz.sh

# The ringcomm benchmark against Gloo and MPI, and training throughput
# against torch DDP (see docs/performance.md).
bench: build
	$(BUILD)/bench/ringcomm-bench --op allreduce --ranks 2 --sizes 1M:64M --transport tcp,shm --compare gloo,mpi --check
	bench/ddp_throughput --build $(BUILD)
	$(BUILD)/bench/sched-throughput
	$(BUILD)/bench/http-bench
	bench/files_throughput --build $(BUILD)
	bench/metrics_ingest --build $(BUILD)
	bench/agent_overhead --build $(BUILD)
	$(BUILD)/src/sim/ringmaster-sim --trace $(TRACE) --nodes 64 --gpus-per-node 8

# Starts a local cluster, submits a 2-replica job, streams its logs, waits for it.
demo: build
	bash scripts/demo.sh $(BUILD)/src/cli/ringmaster

# docs/cli.md, the CLI reference, regenerated from the CLI's own help (the
# test repo.cli_reference fails while it differs). Builds only the CLI.
cli-docs:
	test -f $(BUILD)/CMakeCache.txt || cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)
	cmake --build $(BUILD) --target ringmaster
	$(BUILD)/src/cli/ringmaster cli-reference > docs/cli.md.tmp
	mv docs/cli.md.tmp docs/cli.md

clean:
	rm -rf $(BUILD)
