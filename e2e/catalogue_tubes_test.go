package e2e

// Tubes: names, use/watch/ignore, list-tubes ordering (swap-remove), tube
// lifetime and pause-tube parsing.

import (
	"fmt"
	"strings"
	"testing"
)

// yamlReply frames a YAML body the way the server must: OK <n>, body, CRLF.
func yamlReply(body string) string {
	return fmt.Sprintf("OK %d\r\n%s\r\n", len(body), body)
}

// tubeList is the list-tubes / list-tubes-watched reply for names.
func tubeList(names ...string) string {
	var b strings.Builder
	b.WriteString("---\n")
	for _, n := range names {
		b.WriteString("- " + n + "\n")
	}
	return yamlReply(b.String())
}

// Upstream's cttest_underscore.
func TestUnderscore(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	mustSend(t, c, "use x_y\r\n")
	expect(t, c, "USING x_y\r\n")
}

// Upstream's cttest_multi_tube.
func TestMultiTube(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"use abc\r\n", "USING abc\r\n"},
		{"put 999999 0 0 0\r\n\r\n", "INSERTED 1\r\n"},
		{"use def\r\n", "USING def\r\n"},
		{"put 99 0 0 0\r\n\r\n", "INSERTED 2\r\n"},
		{"watch abc\r\n", "WATCHING 2\r\n"},
		{"watch def\r\n", "WATCHING 3\r\n"},
		{"reserve\r\n", "RESERVED 2 0\r\n\r\n"},
	})
}

// Upstream's cttest_list_tube.
func TestListTube(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"watch w\r\n", "WATCHING 2\r\n"},
		{"use u\r\n", "USING u\r\n"},
		{"list-tubes\r\n", tubeList("default", "w", "u")},
		{"list-tube-used\r\n", "USING u\r\n"},
		{"list-tubes-watched\r\n", tubeList("default", "w")},
		{"ignore default\r\n", "WATCHING 1\r\n"},
		{"list-tubes-watched\r\n", tubeList("w")},
		{"ignore w\r\n", "NOT_IGNORED\r\n"},
	})
}

// Upstream's cttest_use_tube_long.
func TestUseTubeLong(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	name := strings.Repeat("0123456789", 20)
	runSteps(t, c, []step{
		{"use " + name + "\r\n", "USING " + name + "\r\n"},
		{"use " + name + "Z\r\n", "BAD_FORMAT\r\n"},
		{"list-tube-used\r\n", "USING " + name + "\r\n"},
	})
}

// Upstream's cttest_longest_command.
func TestLongestCommand(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	name := strings.Repeat("a", 200)
	line := "pause-tube " + name + " 4294967295\r\n"
	if len(line) != 224 {
		t.Fatalf("line is %d bytes", len(line))
	}
	runSteps(t, c, []step{
		{"use " + name + "\r\n", "USING " + name + "\r\n"},
		{line, "PAUSED\r\n"},
	})
}

// The tube-name alphabet and the single-space rule.
func TestTubeNames(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	good := "AZaz09-+/;.$_()"
	runSteps(t, c, []step{
		{"use " + good + "\r\n", "USING " + good + "\r\n"},
		{"watch " + good + "\r\n", "WATCHING 2\r\n"},
		{"use a-\r\n", "USING a-\r\n"},
		{"use -a\r\n", "BAD_FORMAT\r\n"},
		{"watch -a\r\n", "BAD_FORMAT\r\n"},
		{"use  a\r\n", "BAD_FORMAT\r\n"},
		{"use a \r\n", "BAD_FORMAT\r\n"},
		{"use a b\r\n", "BAD_FORMAT\r\n"},
		{"use a*b\r\n", "BAD_FORMAT\r\n"},
		{"use a,b\r\n", "BAD_FORMAT\r\n"},
		{"use a\tb\r\n", "BAD_FORMAT\r\n"},
		{"use é\r\n", "BAD_FORMAT\r\n"},
		{"watch a b\r\n", "BAD_FORMAT\r\n"},
		{"ignore a b\r\n", "BAD_FORMAT\r\n"},
		{"stats-tube a b\r\n", "BAD_FORMAT\r\n"},
		{"stats-tube -a\r\n", "BAD_FORMAT\r\n"},
		{"stats-tube " + strings.Repeat("x", 201) + "\r\n", "BAD_FORMAT\r\n"},
		{"use " + strings.Repeat("x", 201) + "\r\n", "BAD_FORMAT\r\n"},
		{"stats-tube nosuchtube\r\n", "NOT_FOUND\r\n"},
		{"list-tube-used\r\n", "USING a-\r\n"},
	})
}

// Watch and ignore semantics.
func TestWatchIgnore(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"watch default\r\n", "WATCHING 1\r\n"}, // already watched: same count
		{"watch a\r\n", "WATCHING 2\r\n"},
		{"watch a\r\n", "WATCHING 2\r\n"},
		{"ignore nosuch\r\n", "WATCHING 2\r\n"}, // not watched: no error
		{"list-tubes\r\n", tubeList("default", "a")},
		{"ignore a\r\n", "WATCHING 1\r\n"},
		{"ignore default\r\n", "NOT_IGNORED\r\n"},
		{"ignore nosuch\r\n", "WATCHING 1\r\n"}, // not watched: no NOT_IGNORED either
		{"list-tubes\r\n", tubeList("default")}, // a was freed, nosuch never created
		{"list-tubes-watched\r\n", tubeList("default")},
	})
}

// list-tubes and list-tubes-watched keep creation order, but a removed
// entry is replaced by the last one (swap-remove).
func TestListTubesSwapRemove(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"watch x\r\n", "WATCHING 2\r\n"},
		{"watch y\r\n", "WATCHING 3\r\n"},
		{"watch z\r\n", "WATCHING 4\r\n"},
		{"ignore x\r\n", "WATCHING 3\r\n"},
		{"list-tubes-watched\r\n", tubeList("default", "z", "y")},
		{"list-tubes\r\n", tubeList("default", "z", "y")},
	})

	// An example from upstream's code: [default,k,dl,t1,t2,t3,t4] loses t2.
	d := s.dial(t)
	runSteps(t, d, []step{
		{"watch k\r\n", "WATCHING 2\r\n"},
		{"watch dl\r\n", "WATCHING 3\r\n"},
		{"watch t1\r\n", "WATCHING 4\r\n"},
		{"watch t2\r\n", "WATCHING 5\r\n"},
		{"watch t3\r\n", "WATCHING 6\r\n"},
		{"watch t4\r\n", "WATCHING 7\r\n"},
		{"ignore t2\r\n", "WATCHING 6\r\n"},
		{"list-tubes-watched\r\n", tubeList("default", "k", "dl", "t1", "t4", "t3")},
		{"list-tubes\r\n", tubeList("default", "z", "y", "k", "dl", "t1", "t4", "t3")},
	})
	// Freeing z (watched by c only) moves the last tube, t3, into its slot.
	runSteps(t, c, []step{
		{"ignore z\r\n", "WATCHING 2\r\n"},
		{"list-tubes\r\n", tubeList("default", "t3", "y", "k", "dl", "t1", "t4")},
	})
}

// A tube lives while a connection uses or watches it or a job is in
// it; then it is freed at once.
func TestTubeLifetime(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	c := s.dial(t)
	runSteps(t, c, []step{
		{"use t\r\n", "USING t\r\n"},
		{"put 0 0 10 1\r\nx\r\n", "INSERTED 1\r\n"},
		{"use default\r\n", "USING default\r\n"},
		{"list-tubes\r\n", tubeList("default", "t")}, // the job keeps t
		{"delete 1\r\n", "DELETED\r\n"},
		{"list-tubes\r\n", tubeList("default")},
		{"stats-tube t\r\n", "NOT_FOUND\r\n"},
		{"pause-tube t 10\r\n", "NOT_FOUND\r\n"}, // pause-tube does not create
		{"list-tubes\r\n", tubeList("default")},
		{"use p\r\n", "USING p\r\n"},
		{"pause-tube p 100\r\n", "PAUSED\r\n"},
		{"use default\r\n", "USING default\r\n"}, // p is freed, its pause lost
		{"use p\r\n", "USING p\r\n"},
	})
	st := statsTube(t, c, "p")
	if st["pause"] != "0" || st["cmd-pause-tube"] != "0" {
		t.Fatalf("recreated tube p: pause %s cmd-pause-tube %s", st["pause"], st["cmd-pause-tube"])
	}
	// A tube used by a connection is freed when that connection closes.
	d := s.dial(t)
	mustSend(t, d, "use gone\r\n")
	expect(t, d, "USING gone\r\n")
	mustSend(t, c, "list-tubes\r\n")
	expect(t, c, tubeList("default", "p", "gone"))
	d.nc.Close()
	waitFor(t, defaultTimeout, "tube gone to be freed", func() bool {
		mustSend(t, c, "list-tubes\r\n")
		return readYAML(t, c) == "---\n- default\n- p\n"
	})
}

// pause-tube reads its tube name with read_tube_name: spaces are
// skipped and the name ends at the first invalid character.
func TestPauseTubeParsing(t *testing.T) {
	t.Parallel()
	c := startServer(t).dial(t)
	runSteps(t, c, []step{
		{"use foo\r\n", "USING foo\r\n"},
		{"pause-tube  foo  10\r\n", "PAUSED\r\n"},
		{"pause-tube foo 0\r\n", "PAUSED\r\n"},
		{"pause-tube foo\t1\r\n", "BAD_FORMAT\r\n"},
		{"pause-tube foo 1 \r\n", "BAD_FORMAT\r\n"},
		{"pause-tube foo\r\n", "BAD_FORMAT\r\n"},
		{"pause-tube foo x\r\n", "BAD_FORMAT\r\n"},
		{"pause-tube -foo 1\r\n", "BAD_FORMAT\r\n"},
		{"pause-tube bar 1\r\n", "NOT_FOUND\r\n"},
		{"pause-tube " + strings.Repeat("f", 201) + " 1\r\n", "BAD_FORMAT\r\n"},
	})
}
