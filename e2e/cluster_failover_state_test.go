package e2e

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// What a failover keeps besides the jobs (docs/cluster.md): pauses and,
// on the nodes told to drain, drain mode.

// survivorAnswers waits until a command sent to addr on a fresh connection
// (a survivor forwards it to whichever node leads) gets an answer that
// starts with prefix, and returns it.
func survivorAnswers(t *testing.T, addr, cmd, prefix string) string {
	t.Helper()
	var got string
	waitFor(t, 60*time.Second, "an answer "+prefix+"... to "+strings.TrimSpace(cmd)+" through "+addr, func() bool {
		got = try(addr, cmd, 5*time.Second)
		return strings.HasPrefix(got, prefix)
	})
	return got
}

// survivorStatsTube is stats-tube of name through a survivor at addr, once
// a leader answers it.
func survivorStatsTube(t *testing.T, addr, name string) map[string]string {
	t.Helper()
	_, body, _ := strings.Cut(survivorAnswers(t, addr, "stats-tube "+name+"\r\n", "OK "), "\r\n")
	return yamlMap(t, strings.TrimSuffix(body, "\r\n"))
}

// TestClusterPauseSurvivesTheLeadersDeath: pause-tube is replicated. After
// the leader is killed (kill -9), the new leader keeps each pause with the
// time that is left of it: stats-tube says so, a reserve does not get the
// paused tube's job until the pause ends, and a paused tube with no job is
// paused too. The tube's counters start again from 0.
func TestClusterPauseSurvivesTheLeadersDeath(t *testing.T) {
	const short = 5 * time.Second
	tc := startTestCluster(t, 3)
	lead := tc.leader()
	c := lead.srv.dial(t)
	mustSend(t, c, "use long\r\n")
	expect(t, c, "USING long\r\n")
	put(t, c, 0, 0, 60, "paused an hour", 1)
	mustSend(t, c, "use short\r\n")
	expect(t, c, "USING short\r\n")
	put(t, c, 0, 0, 60, "paused a while", 2)
	mustSend(t, c, "watch empty\r\n")
	expect(t, c, "WATCHING 2\r\n")
	mustSend(t, c, "pause-tube long 3600\r\npause-tube empty 3600\r\n")
	expect(t, c, "PAUSED\r\nPAUSED\r\n")
	sent := time.Now()
	mustSend(t, c, "pause-tube short "+strconv.Itoa(int(short/time.Second))+"\r\n")
	expect(t, c, "PAUSED\r\n")

	lead.srv.stop()
	survivor := tc.other(lead)
	st := survivorStatsTube(t, survivor.srv.addr, "long")
	if st["pause"] != "3600" || st["current-jobs-ready"] != "1" {
		t.Fatalf("the new leader's tube long: pause %q, %q jobs ready; want 3600, 1", st["pause"], st["current-jobs-ready"])
	}
	// The counters are the engine's: the new leader's start from 0.
	if st["cmd-pause-tube"] != "0" || st["total-jobs"] != "0" {
		t.Fatalf("the new leader's tube long: cmd-pause-tube %q, total-jobs %q; want 0, 0", st["cmd-pause-tube"], st["total-jobs"])
	}
	if left, _ := strconv.Atoi(st["pause-time-left"]); left <= 0 || left > 3600 {
		t.Fatalf("the new leader's tube long has pause-time-left %q", st["pause-time-left"])
	}
	st = survivorStatsTube(t, survivor.srv.addr, "empty")
	if st["pause"] != "3600" || st["current-jobs-ready"] != "0" {
		t.Fatalf("the new leader's tube empty: pause %q, %q jobs ready; want 3600, 0", st["pause"], st["current-jobs-ready"])
	}

	// Each reserve on a fresh connection through the survivor, so that
	// a connection the survivor closes (its leader gone a while, on a
	// loaded machine) costs one poll, not the test.
	watch := func(tube string) string {
		return "watch " + tube + "\r\nignore default\r\nreserve-with-timeout 0\r\n"
	}
	const timedOut = "WATCHING 2\r\nWATCHING 1\r\nTIMED_OUT\r\n"
	if got := survivorAnswers(t, survivor.srv.addr, watch("long"), "WATCHING"); got != timedOut {
		t.Fatalf("a reserve on tube long, paused: %q", got)
	}
	var got string
	waitFor(t, 60*time.Second, "the job of tube short once its pause ends", func() bool {
		got = try(survivor.srv.addr, watch("short"), 5*time.Second)
		return strings.HasPrefix(got, "WATCHING") && got != timedOut
	})
	if took := time.Since(sent); took < short {
		t.Fatalf("tube short's job was reserved %v after its %v pause began: %q", took, short, got)
	}
	if want := "WATCHING 2\r\nWATCHING 1\r\nRESERVED 2 14\r\npaused a while\r\n"; got != want {
		t.Fatalf("a reserve on tube short: %q, want %q", got, want)
	}
}

// TestClusterDrainSurvivesTheLeadersDeath: drain mode is each process's,
// as upstream's, and a follower told to drain (SIGUSR1) drains once it
// leads; so with every member told, the new leader refuses puts after the
// old one is killed.
func TestClusterDrainSurvivesTheLeadersDeath(t *testing.T) {
	tc := startTestCluster(t, 3)
	lead := tc.leader()
	for _, nd := range tc.nodes {
		if nd != lead {
			waitFor(t, 30*time.Second, nd.id+" to follow", func() bool {
				return strings.Contains(nd.srv.out.String(), "cluster: following")
			})
		}
		nd.srv.signal(t, syscall.SIGUSR1)
	}
	waitFor(t, 30*time.Second, "the leader to drain", func() bool {
		return try(lead.srv.addr, "put 0 0 60 1\r\nx\r\n", 5*time.Second) == "DRAINING\r\n"
	})
	lead.srv.stop()
	survivor := tc.other(lead)
	var got string
	waitFor(t, 60*time.Second, "a put through a survivor to be answered", func() bool {
		got = try(survivor.srv.addr, "put 0 0 60 1\r\nx\r\n", 5*time.Second)
		return got != ""
	})
	if got != "DRAINING\r\n" {
		t.Fatalf("the new leader answered a put %q, want DRAINING", got)
	}
}
