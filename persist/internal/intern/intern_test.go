package intern

import (
	"testing"
	"unsafe"
)

func TestOfKeepsOneCopy(t *testing.T) {
	m := Strings{}
	a := m.Of([]byte("emails"))
	b := m.Of([]byte("emails"))
	if a != "emails" || unsafe.StringData(a) != unsafe.StringData(b) {
		t.Fatalf("Of returned %q and %q, not one copy", a, b)
	}
	if m.Of([]byte("reports")) != "reports" || len(m) != 2 {
		t.Fatalf("a second name: %v", m)
	}
}
