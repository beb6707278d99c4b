package config

import (
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestDropPrivilegesNoSuchUser(t *testing.T) {
	err := DropPrivileges("no-such-user-beanpole")
	var pe *PrivilegeError
	if !errors.As(err, &pe) || pe.Code != ExitNoSuchUser {
		t.Fatalf("err = %#v; want a PrivilegeError with code %d", err, ExitNoSuchUser)
	}
	if want := `getpwnam("no-such-user-beanpole"): no such user`; err.Error() != want {
		t.Errorf("message = %q; want %q", err, want)
	}
	if code := ExitCodeFor(err); code != 33 {
		t.Errorf("ExitCodeFor = %d; want 33", code)
	}
}

// Numeric ids are not names, as with getpwnam.
func TestDropPrivilegesNumericIsNotAName(t *testing.T) {
	if code := ExitCodeFor(DropPrivileges("4242424")); code != ExitNoSuchUser {
		t.Fatalf("ExitCodeFor = %d; want %d", code, ExitNoSuchUser)
	}
}

func TestExitCodeFor(t *testing.T) {
	if got := ExitCodeFor(nil); got != 0 {
		t.Errorf("ExitCodeFor(nil) = %d", got)
	}
	if got := ExitCodeFor(errors.New("x")); got != 1 {
		t.Errorf("ExitCodeFor(other) = %d", got)
	}
	for _, code := range []int{ExitUserLookup, ExitNoSuchUser, ExitSetID} {
		if got := ExitCodeFor(&PrivilegeError{Code: code, Op: "op", Err: syscall.EPERM}); got != code {
			t.Errorf("ExitCodeFor(code %d) = %d", code, got)
		}
	}
}

type identity struct {
	UID, GID, EUID, EGID int
	Groups               []int
	Err                  string
}

func dropPrivilegesChild() {
	var id identity
	if err := DropPrivileges(os.Getenv(helperArgsEnv)); err != nil {
		id.Err = err.Error()
	}
	id.UID, id.GID, id.EUID, id.EGID = syscall.Getuid(), syscall.Getgid(), syscall.Geteuid(), syscall.Getegid()
	id.Groups, _ = syscall.Getgroups()
	json.NewEncoder(os.Stdout).Encode(id)
}

// Changing identity is irreversible, so it happens in a child process.
func TestDropPrivilegesAsRoot(t *testing.T) {
	if syscall.Geteuid() != 0 {
		t.Skip("needs root")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(withoutListenEnv(os.Environ()), helperEnv+"=drop-privileges", helperArgsEnv+"=nobody")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper: %v", err)
	}
	var id identity
	line, _, _ := strings.Cut(string(out), "\n")
	if err := json.Unmarshal([]byte(line), &id); err != nil {
		t.Fatalf("helper output %q: %v", out, err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	if id.Err != "" || id.UID != uid || id.EUID != uid || id.GID != gid || id.EGID != gid {
		t.Errorf("after -u nobody: %+v; want uid %d gid %d", id, uid, gid)
	}
	if len(id.Groups) != 0 {
		t.Errorf("supplementary groups kept: %v", id.Groups)
	}
}
