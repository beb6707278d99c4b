# beanpole: a drop-in replacement for beanstalkd.
GO      ?= go
BIN     ?= beanpole
ARGS    ?=

.PHONY: all build run test race fuzz bench bench-floor vet clean soak stress deb

all: build

build:
	$(GO) build -o $(BIN) .

# Builds and starts the server on 0.0.0.0:11300 (pass flags with ARGS="-p 11301 -V").
run: build
	./$(BIN) $(ARGS)

# The server's module, and the tests and the benchmark in modules of their
# own (e2e/, bench/), so that the server's go.mod lists only what it runs on.
MODULES := . e2e bench

vet:
	@for m in $(MODULES); do (cd $$m && $(GO) vet ./...) || exit 1; done
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1)

# Everything CI runs: vet, all tests, the race detector (see race), and a
# short fuzz of the codec. The fuzz budget is a count, not a duration:
# go1.26's fuzz coordinator can report a spurious "context deadline
# exceeded" when a duration runs out on a loaded machine (golang/go#75804,
# fixed in go1.27).
test: vet
	$(GO) test -count=1 ./...
	cd e2e && $(GO) test -count=1 ./...
	cd bench && $(GO) test -count=1 ./...
	@$(MAKE) --no-print-directory race
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=500000x ./codec
	$(GO) test -run='^$$' -fuzz=FuzzDecoder -fuzztime=200000x ./codec

# The race detector over the concurrent packages' own tests, then over the
# server as the whole e2e suite drives it: a -race build of the server as
# BEANPOLE_TEST_BIN. The harness finds that it is race-built (its build
# info), fails the test whose server reports a race (a "WARNING: DATA RACE"
# in its output, or exit status 66), and leaves out the bounds on memory and
# latency that mean nothing under -race; GORACE is left at its defaults,
# halt_on_error=0 (why: e2e/harness_test.go, "The race detector").
race:
	$(GO) test -count=1 -race ./engine/... ./loop/... ./codec/... ./persist/... ./admin/... ./server/...
	cd third_party/gnet && $(GO) test -count=1 -race -run Patch .
	$(GO) build -race -o bin/beanpole-race .
	cd e2e && BEANPOLE_TEST_BIN=$(CURDIR)/bin/beanpole-race $(GO) test -count=1 .

# The binlog's long crash soak: 60 kill -9 rounds per mode plus random cuts
# (BEANPOLE_SOAK_ROUNDS=N to change).
soak:
	cd e2e && BEANPOLE_SOAK=1 $(GO) test -count=1 -timeout 30m -v -run 'TestBinlog' .

# The long searches for concurrency bugs, against a -race server: the
# randomized model-checked test for STRESS_TIME (default 30m, split across
# its modes), then the pipelined delete+reserve racing a put for 100,000
# rounds per mode (4 pairs x 25,000), then the cluster's randomized fault
# test for 5 minutes.
STRESS_TIME ?= 30m
stress:
	$(GO) build -race -o bin/beanpole-race .
	cd e2e && BEANPOLE_TEST_BIN=$(CURDIR)/bin/beanpole-race BEANPOLE_RANDOM_DURATION=$(STRESS_TIME) \
		$(GO) test -count=1 -timeout 0 -v -run 'TestRandomizedClientsAgainstModel' .
	cd e2e && BEANPOLE_TEST_BIN=$(CURDIR)/bin/beanpole-race BEANPOLE_CORE_ROUNDS=25000 \
		$(GO) test -count=1 -timeout 0 -v -run 'TestCoreDeleteReserveRacesPut' .
	cd e2e && BEANPOLE_TEST_BIN=$(CURDIR)/bin/beanpole-race BEANPOLE_CLUSTER_RANDOM_DURATION=5m \
		$(GO) test -count=1 -timeout 0 -v -run 'TestClusterRandomizedFaults' .

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=5m ./codec

# beanpole against C beanstalkd, side by side (see bench/README.md); the run
# also writes docs/performance.md.
bench:
	@command -v beanstalkd >/dev/null && command -v stunnel4 >/dev/null || (apt-get update && apt-get install -y beanstalkd stunnel4)
	mkdir -p bin bench/results
	$(GO) build -o bin/beanpole .
	cd bench && $(GO) run . -beanpole $(CURDIR)/bin/beanpole -beanstalkd $$(command -v beanstalkd) -out results -doc ../docs/performance.md $(BENCHARGS)

# beanpole against bench/floor, a gnet responder with no engine behind it:
# how close the round trips, pipelines and accepting 10,000 connections get
# to what gnet and the kernel allow on this machine.
bench-floor:
	mkdir -p bin bench/results/floor
	$(GO) build -o bin/beanpole .
	cd bench && $(GO) build -o $(CURDIR)/bin/floor ./floor
	cd bench && $(GO) run . -beanpole $(CURDIR)/bin/beanpole -beanstalkd $(CURDIR)/bin/floor -only roundtrip,pipeline,idle-10000 -pinned '' -out results/floor $(BENCHARGS)

# A Debian package in bin/ (dist/mkdeb.sh): the binary, built hardened
# there (PIE, full RELRO, stripped), the units, the defaults file, the man
# page, the docs and the licenses.
deb:
	GO=$(GO) dist/mkdeb.sh bin

clean:
	rm -f $(BIN) bin/beanpole bin/beanpole-race bin/floor
