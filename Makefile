# beanpole: a drop-in replacement for beanstalkd.
GO      ?= go
BIN     ?= beanpole
ARGS    ?=

.PHONY: all build run test test-unit test-e2e test-e2e-alone test-bench fuzz-short race race-unit race-gnet race-build race-e2e fuzz bench bench-floor vet clean soak stress deb

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

# Everything CI runs: vet, all tests, the race detector (see race) and a
# short fuzz of the codec. The steps run at once (make -j): most of the
# e2e suite waits on timers and sockets, so the CPU-bound steps (compiling,
# unit tests, fuzzing) fill the time it leaves; each step's output is
# printed whole when it ends. Then the e2e tests of E2E_ALONE run, with
# nothing else of the suite beside them: they bound another client's
# latency or the server's memory while one client loads it, and they are
# the tests that are not parallel in the suite. The fuzz budget is a count,
# not a duration: go1.26's fuzz coordinator can report a spurious "context
# deadline exceeded" when a duration runs out on a loaded machine. The
# long versions of the searches are in stress.
TEST_STEPS := race-e2e test-e2e race-unit test-unit fuzz-short vet race-gnet test-bench
test:
	@$(MAKE) --no-print-directory -j$(words $(TEST_STEPS)) --output-sync=target $(TEST_STEPS)
	@$(MAKE) --no-print-directory test-e2e-alone

test-unit:
	$(GO) test -count=1 ./...

E2E_ALONE := TestPipelinedRunDoesNotStallOtherClients TestSlowOperationsDoNotStallOtherTubes TestAcceptBurstSpreadsOverLoops \
	TestUnsentRepliesStayWithinTheCapPerConnection TestListTubesToNonReadersStaysUnderTheCeiling \
	TestTLSNonReadersCostWhatPlaintextOnesDo TestHTTPAbuseLeavesTheProtocolServedAndMemoryBounded \
	TestLargeBodyDoesNotStallOthers TestManyIdleConnections TestThousandParkedFloodersStayBounded \
	TestTLSPartialRecordsAreChargedAsPlaintextBodies
space := $() $()
e2e-alone = ^($(subst $(space),|,$(strip $(E2E_ALONE))))$$

# The e2e suite but E2E_ALONE, and E2E_ALONE. The randomized fault searches
# run in race-e2e only: against a race-built server they search as well,
# and check for races besides.
RACE_E2E_ONLY := TestClusterRandomizedFaultsLoseNothingAcknowledged TestGroupsRandomizedFaultsLoseNothingAcknowledged \
	TestGroupsOnReplicasRandomizedFaultsLoseNothingAcknowledged
test-e2e:
	cd e2e && $(GO) test -count=1 -skip '^($(subst $(space),|,$(strip $(E2E_ALONE) $(RACE_E2E_ONLY))))$$' ./...

test-e2e-alone:
	cd e2e && $(GO) test -count=1 -run '$(e2e-alone)' ./...

test-bench:
	cd bench && $(GO) test -count=1 ./...

fuzz-short:
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=500000x ./codec
	$(GO) test -run='^$$' -fuzz=FuzzDecoder -fuzztime=200000x ./codec

# The race detector over the concurrent packages' own tests, then over the
# server as the e2e suite drives it: a -race build of the server as
# BEANPOLE_TEST_BIN. The harness finds that it is race-built (its build
# info), fails the test whose server reports a race (a "WARNING: DATA RACE"
# in its output, or exit status 66), and leaves out the bounds on memory and
# latency that mean nothing under -race; GORACE is left at its defaults,
# halt_on_error=0 (why: e2e/harness_test.go, "The race detector").
#
# The e2e pass leaves out the tests of RACE_E2E_SKIP_FILES, which add
# nothing under the race detector to what the plain pass and the packages'
# race tests check, and cost the most under it (stress runs them too):
# - catalogue_*_test.go, limits_test.go: one connection's commands and
#   replies, on one event loop; the engine and codec paths they take are
#   under -race in race-unit, and many connections at once are in
#   multiconn, pipeline, timers, core and random, which stay.
# - import*_test.go: beanpole import, and a replay before anything serves.
# - deb_test.go: builds its own binary from the source; the race build is
#   not used. browser_test.go: the page's script; the HTTP side it reads
#   is in http, dashboard and prometheus_kit, which stay.
# - memory_test.go, memory_bounds_test.go, reply_bounds_test.go,
#   tube_lock_bounds_test.go, fairness_test.go, accept_balance_test.go:
#   bounds on memory and latency, which a race build does not check
#   (raceSkipsBound), while it runs them 5-15 times slower; the flow
#   control they drive is in backpressure, robustness and pipeline.
# And RACE_E2E_SKIP_TESTS: the cluster tests of both passes take turns,
# one cluster at a time (e2e/cluster_test.go), so they are the longest
# chain of make test; the race pass keeps those of replication, failover,
# fencing, forwarding and forged RPCs, and leaves out those that mostly
# wait (a raft port's handshake deadline, five failovers in a row, a C
# binlog's import) and those of flags, listeners, status, membership and
# certificate reloads, whose paths run once, in order, between elections
# (stress runs them race-built too). And the thousand parked flooders, a
# bound on memory that makes the race build take in 512 MiB of input.
RACE_E2E_SKIP_TESTS := TestRaftPortFloodOfSilentConnectionsDoesNotStopAFailover TestClusterFailoverTime TestGroupsFailoverTime \
	TestGroupsInternalListenersTakeOnlyNodes \
	TestClusterSeededFromABeanstalkdBinlog TestThousandParkedFloodersStayBounded \
	TestClusterStatusJoinAndTransferThroughTheHTTPSide TestClusterStatusAndJoinOverHTTPS \
	TestClusterStatusWithoutTheTokenRevealsNoTopology \
	TestClusterAddOfAnUnreachableAddressCannotWedgeTheGroup TestClusterClockOffsetOnOneNodeMovesOnlyDelays \
	TestClusterRemovedNodesExitWithStatus78AndTheLeaderHandsOverFirst \
	TestClusterNodeAnnouncesItsTCPListenerBesideAUnixSocket TestClusterNodeOnAUnixSocketAloneIsRefused \
	TestRaftPlaintextOffLoopbackNeedsTheInsecureFlag TestClusterNodesSpeakMutualTLSAndAStrangerCannotJoin \
	TestClusterNodeLinksTakeTheReloadedCAAtSIGHUP TestDashboardWithoutTheTokenRevealsNoRaftAddresses \
	TestClusterFollowerKeepsDescriptorsForRaft TestClusterFollowerOutlivesSIGUSR1AndSIGHUPAndDrainsOnceItLeads
RACE_E2E_SKIP_FILES := catalogue_jobs_test.go catalogue_parse_test.go catalogue_stats_test.go \
	catalogue_tubes_test.go limits_test.go import_test.go import_from_test.go import_hostile_test.go \
	deb_test.go browser_test.go memory_test.go memory_bounds_test.go reply_bounds_test.go \
	tube_lock_bounds_test.go fairness_test.go accept_balance_test.go
race-skip = $(shell cd e2e && sed -n 's/^func \(Test[A-Za-z0-9_]*\)(t \*testing\.T).*/\1/p' $(RACE_E2E_SKIP_FILES) | paste -sd'|' -)|$(subst $(space),|,$(strip $(RACE_E2E_SKIP_TESTS)))

race: race-unit race-gnet race-e2e

# The cluster package's tests of what runs beside raft's own goroutines (the
# state machine and its snapshots, the journal's entries, the lease, groups
# sharing a raft port); its tests of elections and membership are timers on a
# loaded machine, which run in test-unit and, race-built, in race-e2e.
RACE_CLUSTER := ^Test(Snapshot|FSM|Lease|Malformed|PauseRecord|GroupsSharing)
race-unit:
	$(GO) test -count=1 -race ./engine/... ./loop/... ./codec/... ./persist/... ./admin/... ./server/...
	$(GO) test -count=1 -race -run '$(RACE_CLUSTER)' ./cluster/

race-gnet:
	cd third_party/gnet && $(GO) test -count=1 -race -run Patch .

race-build:
	$(GO) build -race -o bin/beanpole-race .

race-e2e: race-build
	cd e2e && BEANPOLE_TEST_BIN=$(CURDIR)/bin/beanpole-race $(GO) test -count=1 -skip '^($(race-skip))$$' .

# The binlog's long crash soak: 60 kill -9 rounds per mode plus random cuts
# (BEANPOLE_SOAK_ROUNDS=N to change).
soak:
	cd e2e && BEANPOLE_SOAK=1 $(GO) test -count=1 -timeout 30m -v -run 'TestBinlog' .

# The long searches for concurrency bugs, against a -race server: the
# randomized model-checked test for STRESS_TIME (default 30m, split across
# its modes), then the pipelined delete+reserve racing a put for 100,000
# rounds per mode (4 pairs x 25,000), then the cluster's randomized fault
# tests (one group, three groups, five groups on three replicas) for 5
# minutes each, at once, then the whole e2e suite (race-e2e leaves some out).
STRESS_TIME ?= 30m
stress: race-build
	cd e2e && BEANPOLE_TEST_BIN=$(CURDIR)/bin/beanpole-race BEANPOLE_RANDOM_DURATION=$(STRESS_TIME) \
		$(GO) test -count=1 -timeout 0 -v -run 'TestRandomizedClientsAgainstModel' .
	cd e2e && BEANPOLE_TEST_BIN=$(CURDIR)/bin/beanpole-race BEANPOLE_CORE_ROUNDS=25000 \
		$(GO) test -count=1 -timeout 0 -v -run 'TestCoreDeleteReserveRacesPut' .
	cd e2e && BEANPOLE_TEST_BIN=$(CURDIR)/bin/beanpole-race BEANPOLE_CLUSTER_RANDOM_DURATION=5m \
		$(GO) test -count=1 -timeout 0 -v -run 'RandomizedFaultsLoseNothingAcknowledged' .
	cd e2e && BEANPOLE_TEST_BIN=$(CURDIR)/bin/beanpole-race $(GO) test -count=1 -timeout 0 .

fuzz:
	$(GO) test -run='^$$' -fuzz=FuzzParse -fuzztime=5m ./codec

# beanpole against C beanstalkd, side by side (see bench/README.md); the run
# also writes docs/performance.md. The cluster group's capacity rows (many
# groups against one) run with every node confined to 0.2 CPU, a cgroup
# each (as root; -capacity-cpu sets the share, -node-cpu confines every
# row). Those rows alone (the page then holds only them):
#   make bench BENCHARGS="-only cluster-groups3-c50,cluster-groups3-pipeline-c9,cluster6-groups6-r3-c50,cluster6-groups6-r3-pipeline-c36"
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
