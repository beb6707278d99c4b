// Package e2e is the black-box test suite of beanpole: every test starts the
// server binary as a separate process and talks to it over a socket,
// asserting the exact bytes of each reply.
//
// By default TestMain builds the module root with `go build`. Set
// BEANPOLE_TEST_BIN to test another binary instead, for example the C
// beanstalkd 1.12 at /usr/bin/beanstalkd: the suite then adapts the few
// assertions that are documented differences between 1.12 and the 1.13 wire
// target (quoted YAML strings, reserve-with-timeout argument parsing) and
// skips the beanpole decisions that upstream does not follow (the line-length
// rule of docs/behaviour.md 'Long lines', FIFO waiters).
//
// The tests are a Go module of their own (e2e/go.mod), so that the server's
// go.mod lists only what the server runs on. Run them from e2e/ with:
//
//	go test .
//	BEANPOLE_TEST_BIN=/usr/bin/beanstalkd go test .
//	go build -race -o ../bin/beanpole-race .. && BEANPOLE_TEST_BIN=$PWD/../bin/beanpole-race go test .
//
// `make test` runs the first, and the last without the tests the Makefile
// lists in RACE_E2E_SKIP_FILES and RACE_E2E_SKIP_TESTS (`make stress` runs
// them all). A server built with -race is recognised
// by its build information: a race it reports (on stderr), or its exit with
// the race detector's status 66, fails the test that started it, and the
// bounds on the server's memory and latency are logged as not checked
// (raceSkipsBound) while the rest of those tests runs. See "The race
// detector" in harness_test.go for GORACE.
//
// Every test runs its own server and most of them wait on timers, so TestMain
// raises -parallel to 8 unless it is given. The tests that are not parallel
// bound another client's latency or the server's memory, or set the
// process's environment; `make test` runs the first kind (E2E_ALONE) after
// everything else. Cluster tests are parallel but take turns, one cluster
// at a time across the test processes of a machine (clusterTurn), and
// against a race-built server every reply may take raceTimeoutFactor times
// defaultTimeout. -short skips the one test that
// streams 1 GiB (upstream's cttest_job_size_max_plus_1). TestDifferential
// compares the server with /usr/bin/beanstalkd and skips when that is
// missing.
//
// Files: harness_test.go (server processes, exact-byte helpers, target
// detection); catalogue_*_test.go (upstream testserv.c's cttest_* cases, each
// test naming the one it follows, and further cases, by theme); limits_test.go (-z); server_test.go (drain
// mode, unix sockets, flags); timers_test.go; pipeline_test.go;
// multiconn_test.go; client_test.go (go-beanstalk); tls_clients_test.go (the
// client examples of docs/tls.md); differential_test.go.
package e2e
