package cluster

import (
	"net"
	"strings"
	"testing"
	"time"
)

// A node's reports are taken as they come, the highest term's for each
// group; a link that sends what is not a report, or a report longer than
// any node makes, is dropped at once, and its node's last report stays
// only until the link is dialled again (watch forgets it).
func TestViewsTakeReportsAndDropALinkThatSendsOtherwise(t *testing.T) {
	v := &views{peers: map[string][]view{}}
	feed := func(peer, in string) {
		t.Helper()
		a, b := net.Pipe()
		go func() {
			_, _ = a.Write([]byte(in))
			a.Close()
		}()
		done := make(chan struct{})
		go func() {
			v.read(peer, b)
			b.Close()
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("a link of %s sending %.40q was not dropped", peer, in)
		}
	}
	feed("n2", `[{"g":1,"t":4,"l":"n2","a":"127.0.0.1:9"}]`+"\n"+`[{"g":1,"t":5,"l":"n2","a":"127.0.0.1:10"}]`+"\nnot a report\n"+
		`[{"g":1,"t":9,"l":"n9","a":"127.0.0.1:11"}]`+"\n")
	if id, addr := v.leader(1); id != "n2" || addr != "127.0.0.1:10" {
		t.Fatalf("after n2's reports: group 1 led by %q at %q, want n2 at 127.0.0.1:10 (and nothing after the line that is no report)", id, addr)
	}
	feed("n3", `[{"g":1,"t":3,"l":"n3","a":"127.0.0.1:12"},{"g":2,"t":7,"l":"n3","a":"127.0.0.1:13"}]`+"\n")
	if id, _ := v.leader(1); id != "n2" {
		t.Fatalf("an older term's report took group 1 to %q", id)
	}
	if id, addr := v.leader(2); id != "n3" || addr != "127.0.0.1:13" {
		t.Fatalf("group 2 led by %q at %q, want n3", id, addr)
	}
	feed("n4", "["+strings.Repeat(" ", viewsMax)+"]\n")
	if _, ok := v.peers["n4"]; ok {
		t.Fatal("a report longer than any node makes was taken")
	}
	if id, _ := v.leader(3); id != "" {
		t.Fatalf("group 3, which no report names, led by %q", id)
	}
}
