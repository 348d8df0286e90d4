//go:build linux

package exec_test

import (
	"context"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/handlers/exec/internal/supervise"
)

// standinDir, in the environment, makes TestExecWorkerStandin the worker
// that TestExecDescendantsDieWithWorker kills: the test binary run again.
const standinDir = "FENCEQ_EXEC_TEST_STANDIN"

// leaveTwo starts a grandchild in the command's group and one that left
// it (setsid), writes their pids to $1/pid and $1/setsid-pid, and waits.
const leaveTwo = `sleep 30 &
echo $! > "$1/pid"
setsid sleep 30 &
echo $! > "$1/setsid-pid"
wait`

// TestExecWorkerStandin is the worker process of
// TestExecDescendantsDieWithWorker: it runs one job of leaveTwo and is
// killed with SIGKILL while it does.
func TestExecWorkerStandin(t *testing.T) {
	dir := os.Getenv(standinDir)
	if dir == "" {
		t.Skip("only run by TestExecDescendantsDieWithWorker")
	}
	h := mustExec(t, shell(leaveTwo, dir))
	_ = h.ProcessJob(context.Background(), newJob("k", nil))
	t.Fatal("the job ended; it should have been killed with its worker")
}

// A worker killed with SIGKILL takes everything its command started with
// it, even what left the command's process group: its job's lease expires
// and the job runs again elsewhere, so anything left running would do the
// work twice at once.
func TestExecDescendantsDieWithWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	worker := osexec.Command(os.Args[0], "-test.run=^TestExecWorkerStandin$", "-test.count=1")
	worker.Env = append(os.Environ(), standinDir+"="+dir)
	worker.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive this test
	if err := worker.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- worker.Wait() }()
	pids := []int{}
	for _, name := range []string{"pid", "setsid-pid"} {
		pids = append(pids, waitPID(t, filepath.Join(dir, name), exited))
	}
	if err := worker.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	for _, pid := range pids {
		assertGone(t, pid)
	}
}

// A command's leftovers are killed when it exits, even one that left its
// process group; the handler does not wait for its output either.
func TestExecKillsLeftoversThatLeftTheGroup(t *testing.T) {
	t.Parallel()
	h := mustExec(t, shell(`setsid sleep 30 & echo $!`))
	job := newJob("k", nil)
	if err := waitReturn(t, runAsync(context.Background(), h, job), 3*time.Second); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(job.Result())))
	if err != nil {
		t.Fatalf("result %q is not a pid: %v", job.Result(), err)
	}
	assertGone(t, pid)
}

// So are a cancelled command's, in its group or not.
func TestExecCancelKillsWhatLeftTheGroup(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := mustExec(t, shell(leaveTwo, dir))
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := runAsync(ctx, h, newJob("k", nil))
	pids := []int{}
	for _, name := range []string{"pid", "setsid-pid"} {
		pid, err := strconv.Atoi(waitFile(t, filepath.Join(dir, name), done))
		if err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid)
	}
	cancel(context.Canceled)
	waitReturn(t, done, 3*time.Second)
	for _, pid := range pids {
		assertGone(t, pid)
	}
}

// waitPID waits for path to hold a pid, while the process behind exited
// runs.
func waitPID(t *testing.T, path string, exited <-chan error) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		select {
		case err := <-exited:
			t.Fatalf("the worker exited before writing %s: %v", filepath.Base(path), err)
		default:
		}
		if b, err := os.ReadFile(path); err == nil && strings.HasSuffix(string(b), "\n") {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			return pid
		}
	}
	t.Fatalf("%s not written within 10s", filepath.Base(path))
	return 0
}

// The variable that makes a run of the program a supervisor does not reach
// the command: a command that links this package would become one.
func TestExecSupervisorEnvNotPassedOn(t *testing.T) {
	t.Parallel()
	h := mustExec(t, shell(`printf '%s' "${FENCEQ_EXEC_SUPERVISOR-unset}"`))
	job := newJob("k", nil)
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if got := string(job.Result()); got != "unset" {
		t.Errorf("the command saw FENCEQ_EXEC_SUPERVISOR=%q, want it unset", got)
	}
}

// An orphan the supervisor adopts is reaped when it exits, while the
// command still runs: a long job's zombies would use up process ids.
func TestExecOrphansReapedWhileRunning(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := mustExec(t, shell(`(sleep 0.05 & echo $! > "$1/pid")
sleep 0.5
state=$(cut -d' ' -f3 "/proc/$(cat "$1/pid")/stat" 2>/dev/null)
printf '%s' "${state:-gone}"`, dir))
	job := newJob("k", nil)
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if got := string(job.Result()); got != "gone" {
		t.Errorf("the orphan's state while the command ran: %q, want it reaped (gone)", got)
	}
}

// A command that exited 0 succeeds even when something outside its tree
// still holds its standard output once its supervisor has exited (here
// the test itself, as a process the command handed the pipe to would, or
// a drain slowed past outputDrain on a loaded machine): the supervisor
// reported the exit before it exited, and the job must not fail, to be
// run again, for want of that report.
func TestExecOutcomeKeptWhenOutputOutlivesSupervisor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := mustExec(t, shell(`echo $$ > "$1/pid"
while [ ! -e "$1/go" ]; do sleep 0.01; done
printf done`, dir))
	job := newJob("k", nil)
	done := runAsync(context.Background(), h, job)
	pid := waitFile(t, filepath.Join(dir, "pid"), done)
	held, err := os.OpenFile("/proc/"+pid+"/fd/1", os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := os.WriteFile(filepath.Join(dir, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := waitReturn(t, done, 5*time.Second); err != nil {
		t.Fatalf("ProcessJob of a command that exited 0: %v", err)
	}
}

// A worker killed while its command's supervisor starts up (the program's
// runtime and init functions, a few milliseconds) is gone before the
// command is: the supervisor, finding the control pipe already at end of
// file, must not start the command at all. Started and killed an instant
// later, it has often done its work already (here, written its file and
// exited 0) for a job whose lease will expire and run again elsewhere.
func TestExecNotStartedWhenWorkerGoneFirst(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for i := range 20 {
		control, gone, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		gone.Close() // the worker's end, closed by its death
		statusR, statusW, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		ran := filepath.Join(dir, strconv.Itoa(i))
		sup := osexec.Command(os.Args[0])
		sup.Args = []string{supervise.Arg0, "/bin/sh", "sh", "-c", `echo ran > "$1"`, "sh", ran}
		sup.Env = append(os.Environ(), supervise.EnvEntry)
		sup.ExtraFiles = []*os.File{control, statusW}
		if err := sup.Run(); err != nil {
			t.Fatalf("the supervisor: %v", err)
		}
		control.Close()
		statusW.Close()
		b, _ := io.ReadAll(statusR)
		statusR.Close()
		status := strings.TrimSpace(string(b))
		if strings.HasPrefix(status, "exit ") || strings.HasPrefix(status, "signal ") {
			_, err := os.Stat(ran)
			t.Fatalf("run %d: the supervisor of a worker already gone started the command (it reported %q; its file written: %v)", i, status, err == nil)
		}
	}
}

// ignoringDir, in the environment, makes TestExecIgnoringWorkerStandin
// the worker of TestExecKeepsSignalsTheWorkerIgnores.
const ignoringDir = "FENCEQ_EXEC_TEST_IGNORING"

// TestExecIgnoringWorkerStandin is a worker started with SIGHUP and SIGINT
// ignored: it runs one job, a command that reports the signals it
// ignores, and writes the job's result to $dir/sigign.
func TestExecIgnoringWorkerStandin(t *testing.T) {
	dir := os.Getenv(ignoringDir)
	if dir == "" {
		t.Skip("only run by TestExecKeepsSignalsTheWorkerIgnores")
	}
	h := mustExec(t, shell(`grep SigIgn /proc/self/status`))
	job := newJob("k", nil)
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sigign"), job.Result(), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A worker started under nohup (SIGHUP ignored), or in the background of
// a shell (SIGINT ignored), passes that on to its commands, as any program
// does: the supervisor between them must not undo it.
func TestExecKeepsSignalsTheWorkerIgnores(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	worker := osexec.Command("/bin/sh", "-c", `trap "" HUP INT; exec "$0" "$@"`,
		os.Args[0], "-test.run=^TestExecIgnoringWorkerStandin$", "-test.count=1")
	worker.Env = append(os.Environ(), ignoringDir+"="+dir)
	if out, err := worker.CombinedOutput(); err != nil {
		t.Fatalf("the worker: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "sigign"))
	if err != nil {
		t.Fatal(err)
	}
	_, hex, _ := strings.Cut(strings.TrimSpace(string(b)), ":")
	mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
	if err != nil {
		t.Fatalf("the command's SigIgn: %q: %v", b, err)
	}
	for _, sig := range []syscall.Signal{syscall.SIGHUP, syscall.SIGINT} {
		if mask&(1<<(sig-1)) == 0 {
			t.Errorf("the command does not ignore %v, which its worker was started ignoring (SigIgn %x)", sig, mask)
		}
	}
}
