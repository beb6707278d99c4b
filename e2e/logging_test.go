package e2e

import (
	"encoding/json"
	"strings"
	"testing"
)

// --log-json writes one JSON object a line (for log shippers), with the
// level, the time and the message, instead of the console format.
func TestLogJSONWritesOneObjectALine(t *testing.T) {
	skipUnlessBeanpole(t, "--log-json is beanpole's")
	t.Parallel()
	s := startServer(t, "--log-json", "-V")
	roundTrip(t, s.dial(t), defaultTimeout)
	s.stop()
	out := strings.TrimSpace(s.out.String())
	if out == "" {
		t.Fatal("no log lines with -V")
	}
	for _, line := range strings.Split(out, "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("not a JSON object: %q (%v)", line, err)
		}
		for _, k := range []string{"level", "time", "message"} {
			if _, ok := m[k]; !ok {
				t.Fatalf("%q lacks %q", line, k)
			}
		}
	}
}
