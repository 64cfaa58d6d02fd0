# Ringmaster — top-level entry points. `make demo` and `make test` work on a
# fresh Debian 12 machine as root: both install what they need first.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?= -DCMAKE_BUILD_TYPE=RelWithDebInfo

.PHONY: all deps configure build test test-unit test-integration test-e2e demo clean

all: build

deps:
	bash scripts/install-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja $(CMAKE_FLAGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

# Every test: unit, integration and e2e (CTest labels).
test: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) --timeout 300

test-unit: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L unit

test-integration: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L integration

test-e2e: build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) -L e2e

# Starts a local cluster, submits a 2-replica job, streams its logs, waits for it.
demo: build
	bash scripts/demo.sh $(BUILD)/src/cli/ringmaster

clean:
	rm -rf $(BUILD)
