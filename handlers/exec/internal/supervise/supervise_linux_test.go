package supervise

import (
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A leftover the supervisor may not kill (EPERM: one a setuid program
// started) must not keep it, and the job, waiting for ever: killAll gives
// up after its limit and says which processes are left, and why.
func TestKillAllGivesUpOnWhatItMayNotKill(t *testing.T) {
	child := exec.Command("sleep", "30")
	child.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	pid := child.Process.Pid
	defer func() {
		child.Process.Kill()
		child.Wait()
	}()
	kill = func(p int, sig syscall.Signal) error {
		if p == pid || p == -pid {
			return syscall.EPERM
		}
		return syscall.Kill(p, sig)
	}
	defer func() { kill = syscall.Kill }()
	done := make(chan string, 1)
	go func() { done <- killAll(pid, 100*time.Millisecond) }()
	select {
	case left := <-done:
		if !strings.Contains(left, strconv.Itoa(pid)+" (operation not permitted)") {
			t.Errorf("killAll = %q, want it to name %d and EPERM", left, pid)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("killAll did not give up on a process it may not kill")
	}
}

// The dynamic loaders' files are told from a program's.
func TestIsLoader(t *testing.T) {
	for name, want := range map[string]bool{
		"ld-linux-x86-64.so.2": true, "ld-linux-aarch64.so.1": true, "ld-linux.so.2": true, "ld64.so.2": true,
		"ld-musl-x86_64.so.1": true, "ld.so": true,
		"workerd": false, "ld": false, "ldconfig": false, "exec.test": false,
	} {
		if got := isLoader(name); got != want {
			t.Errorf("isLoader(%q) = %v, want %v", name, got, want)
		}
	}
	if _, err := Executable(); err != nil {
		t.Errorf("Executable of a test binary started directly: %v", err)
	}
}

// The package imports nothing that needs package unicode (strings, bytes,
// path/filepath, fmt): its init function would wait for unicode's, and
// every package ready before that and sorting before it (gRPC's,
// protobuf's, OpenTelemetry's registrations, in workerd) would run in each
// supervisor first.
func TestImportsNothingInitializedLate(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Skipf("go list: %v", err)
	}
	for _, pkg := range strings.Fields(string(out)) {
		if pkg == "unicode" {
			t.Errorf("package supervise depends on unicode:\n%s", out)
		}
	}
}
