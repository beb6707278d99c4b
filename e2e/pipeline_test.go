package e2e

// Pipelining: many commands in one write, commands and bodies split across
// writes, and a blocking reserve that holds back the commands behind it.

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Upstream's cttest_2cmdpacket.
func TestTwoCommandPacket(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	mustSend(t, c, "use a\r\nuse b\r\n")
	expect(t, c, "USING a\r\n")
	expect(t, c, "USING b\r\n")
}

// A whole session in one write; the replies come back in order.
func TestPipelinedSession(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	in := "use p\r\n" +
		"put 5 0 10 3\r\nabc\r\n" +
		"put 1 0 10 4\r\nd\r\nf\r\n" +
		"bogus\r\n" +
		"put 0 0 10 0\r\n\r\n" +
		"peek-ready\r\n" +
		"watch p\r\n" +
		"ignore default\r\n" +
		"reserve\r\n" +
		"reserve-with-timeout 0\r\n" +
		"release 3 9 0\r\n" +
		"bury 2 4\r\n" +
		"peek-buried\r\n" +
		"kick 10\r\n" +
		"list-tubes-watched\r\n" +
		"delete 1\r\n" +
		"delete 1\r\n" +
		"reserve\r\n" +
		"touch 2\r\n" +
		"stats-tube p\r\n" +
		"list-tube-used\r\n"
	mustSend(t, c, in)
	expect(t, c, "USING p\r\n"+
		"INSERTED 1\r\n"+
		"INSERTED 2\r\n"+
		"UNKNOWN_COMMAND\r\n"+
		"INSERTED 3\r\n"+
		"FOUND 3 0\r\n\r\n"+
		"WATCHING 2\r\n"+
		"WATCHING 1\r\n"+
		"RESERVED 3 0\r\n\r\n"+
		"RESERVED 2 4\r\nd\r\nf\r\n"+
		"RELEASED\r\n"+
		"BURIED\r\n"+
		"FOUND 2 4\r\nd\r\nf\r\n"+
		"KICKED 1\r\n"+
		tubeList("p")+
		"DELETED\r\n"+
		"NOT_FOUND\r\n"+
		"RESERVED 2 4\r\nd\r\nf\r\n"+
		"TOUCHED\r\n")
	body := readYAML(t, c)
	want := "---\nname: " + q("p") + "\ncurrent-jobs-urgent: 1\ncurrent-jobs-ready: 1\ncurrent-jobs-reserved: 1\n" +
		"current-jobs-delayed: 0\ncurrent-jobs-buried: 0\ntotal-jobs: 3\ncurrent-using: 1\ncurrent-watching: 1\n" +
		"current-waiting: 0\ncmd-delete: 1\ncmd-pause-tube: 0\npause: 0\npause-time-left: 0\n"
	if body != want {
		t.Fatalf("stats-tube p:%s", diffMsg(want, body))
	}
	expect(t, c, "USING p\r\n")
}

// A reserve that blocks holds back the commands pipelined after it;
// they run, in order, once another connection's put has answered it.
func TestPipelinedReserveBlocks(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	w, p := s.dial(t), s.dial(t)
	mustSend(t, w, "reserve\r\nlist-tube-used\r\nuse held\r\nput 0 0 10 2\r\nhi\r\nstats-job 1\r\n")
	expectNothing(t, w, 200*time.Millisecond)
	// The commands after the reserve have not run: tube "held" does not exist.
	runSteps(t, p, []step{
		{"list-tubes\r\n", tubeList("default")},
		{"stats-job 1\r\n", "NOT_FOUND\r\n"},
	})
	if st := stats(t, p); st["current-waiting"] != "1" || st["cmd-use"] != "0" || st["cmd-put"] != "0" {
		t.Fatalf("while the reserve waits: current-waiting %s cmd-use %s cmd-put %s",
			st["current-waiting"], st["cmd-use"], st["cmd-put"])
	}
	put(t, p, 0, 0, 10, "job", 1)
	expect(t, w, "RESERVED 1 3\r\njob\r\n"+
		"USING default\r\n"+
		"USING held\r\n"+
		"INSERTED 2\r\n")
	expectYAMLContains(t, w, "\nid: 1\n", "\nstate: reserved\n")
}

// A pipelined reserve-with-timeout holds back what follows until it
// times out.
func TestPipelinedReserveWithTimeout(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	start := time.Now()
	mustSend(t, c, "reserve-with-timeout 1\r\nuse after\r\n")
	expectWithin(t, c, "TIMED_OUT\r\nUSING after\r\n", defaultTimeout)
	if el := time.Since(start); el < time.Second-early {
		t.Fatalf("replies after %v, want at least 1s", el)
	}
}

// Quit in the middle of a pipeline: earlier replies are written,
// later commands are ignored.
func TestPipelinedQuit(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	mustSend(t, c, "use a\r\nput 0 0 10 1\r\nx\r\nquit\r\nuse b\r\nput 0 0 10 1\r\ny\r\n")
	expect(t, c, "USING a\r\nINSERTED 1\r\n")
	expectClosed(t, c)
	d := s.dial(t)
	runSteps(t, d, []step{
		{"peek 2\r\n", "NOT_FOUND\r\n"},
		{"stats-tube b\r\n", "NOT_FOUND\r\n"},
	})
}

// 1000 puts and 1000 deletes in two writes.
func TestPipelinedThousand(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	const n = 1000
	var in, want strings.Builder
	for i := 1; i <= n; i++ {
		body := fmt.Sprintf("job-%d", i)
		fmt.Fprintf(&in, "put %d 0 60 %d\r\n%s\r\n", i%7, len(body), body)
		fmt.Fprintf(&want, "INSERTED %d\r\n", i)
	}
	mustSend(t, c, in.String())
	expect(t, c, want.String())
	in.Reset()
	want.Reset()
	for i := n; i >= 1; i-- {
		fmt.Fprintf(&in, "delete %d\r\n", i)
		want.WriteString("DELETED\r\n")
	}
	mustSend(t, c, in.String())
	expect(t, c, want.String())
	if st := stats(t, c); st["current-jobs-ready"] != "0" || st["total-jobs"] != "1000" || st["cmd-delete"] != "1000" {
		t.Fatalf("ready %s total-jobs %s cmd-delete %s", st["current-jobs-ready"], st["total-jobs"], st["cmd-delete"])
	}
}

// Commands and bodies arriving one byte at a time.
func TestByteAtATime(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	in := "use slow\r\nput 0 0 10 4\r\na\r\nb\r\npeek 1\r\n"
	for i := 0; i < len(in); i++ {
		mustSend(t, c, in[i:i+1])
		if i%8 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	expect(t, c, "USING slow\r\nINSERTED 1\r\nFOUND 1 4\r\na\r\nb\r\n")
}

// A put whose body arrives later, split between CR and LF.
func TestPutBodyInPieces(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	mustSend(t, c, "put 0 0 10 10\r\n")
	expectNothing(t, c, 100*time.Millisecond)
	mustSend(t, c, "01234")
	expectNothing(t, c, 50*time.Millisecond)
	mustSend(t, c, "56789\r")
	expectNothing(t, c, 50*time.Millisecond)
	mustSend(t, c, "\nput 0 0 10 1\r\nx")
	expect(t, c, "INSERTED 1\r\n")
	mustSend(t, c, "\r\n")
	expect(t, c, "INSERTED 2\r\n")
	mustSend(t, c, "peek 1\r\n")
	expect(t, c, "FOUND 1 10\r\n0123456789\r\n")
}

// Large bodies whose tail arrives later, glued to the next command.
// Past 16 KiB the server reads the rest of a body straight from the socket
// into the job (always so past its 256 KiB read buffer); it must take
// exactly the body and leave the pipelined command behind it for the
// parser, however the bytes are split.
func TestLargeBodyTailWithNextCommand(t *testing.T) {
	t.Parallel()
	for _, size := range []int{60000, 1 << 20} {
		body := strings.Repeat("0123456789abcde\n", size/16)
		for _, split := range []int{1, 20000, len(body) - 1, len(body)} {
			c := startServer(t, "-z", "2000000").dial(t) // ids start at 1
			mustSend(t, c, fmt.Sprintf("put 0 0 10 %d\r\n%s", len(body), body[:split]))
			expectNothing(t, c, 20*time.Millisecond)
			mustSend(t, c, body[split:]+"\r\nput 0 0 10 1\r\nx\r\n")
			expect(t, c, "INSERTED 1\r\nINSERTED 2\r\n")
			mustSend(t, c, "reserve\r\n")
			expect(t, c, fmt.Sprintf("RESERVED 1 %d\r\n%s\r\n", len(body), body))
			runSteps(t, c, []step{
				{"delete 1\r\n", "DELETED\r\n"},
				{"reserve\r\n", "RESERVED 2 1\r\nx\r\n"},
			})
		}
	}
}
