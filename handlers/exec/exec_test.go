//go:build unix

package exec_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/exec"
	"github.com/fenceq/fenceq/jobrow"
)

// newJob builds a job of kind with payload and no progress reporter; the
// other fields are fixed so a test only states what it cares about.
func newJob(kind string, payload []byte) *handlers.Job {
	return handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-1", Queue: "default", Kind: kind, Payload: payload, Attempt: 1, MaxAttempts: 5, Generation: 7}})
}

// shell returns a Config that runs script with /bin/sh; args become
// $1, $2, ...
func shell(script string, args ...string) exec.Config {
	return exec.Config{Command: append([]string{"/bin/sh", "-c", script, "sh"}, args...)}
}

// mustExec builds an exec handler or fails the test.
func mustExec(t *testing.T, cfg exec.Config) handlers.Handler {
	t.Helper()
	h, err := exec.New(cfg)
	if err != nil {
		t.Fatalf("New(%q): %v", cfg.Command, err)
	}
	return h
}

// runAsync runs h on job in a goroutine; the channel gets its error.
func runAsync(ctx context.Context, h handlers.Handler, job *handlers.Job) <-chan error {
	done := make(chan error, 1)
	go func() { done <- h.ProcessJob(ctx, job) }()
	return done
}

// waitFile waits for path to exist with non-empty content and returns it.
func waitFile(t *testing.T, path string, done <-chan error) string {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
			return string(bytes.TrimSpace(b))
		}
		select {
		case err := <-done:
			t.Fatalf("command ended before writing %s: %v", filepath.Base(path), err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	t.Fatalf("%s not written within 5s", filepath.Base(path))
	return ""
}

// waitReturn waits up to limit for the handler's error.
func waitReturn(t *testing.T, done <-chan error, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-done:
		return err
	case <-time.After(limit):
		t.Fatalf("ProcessJob did not return within %v", limit)
		return nil
	}
}

// processGone reports whether pid has exited. A zombie counts as gone: it
// runs nothing, and whether it is reaped depends on this machine's init.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, ok := bytes.Cut(stat, []byte(") "))
	return ok && bytes.HasPrefix(after, []byte("Z"))
}

// assertGone fails unless pid exits soon; SIGKILL is delivered
// asynchronously, so it may take a moment.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			syscall.Kill(pid, syscall.SIGKILL) // do not leave it behind either way
			t.Fatalf("process %d still running after the handler returned", pid)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestExecStdinToResult(t *testing.T) {
	t.Parallel()
	h := mustExec(t, exec.Config{Command: []string{"cat"}})
	job := newJob("copy", []byte(`{"n":1}`))
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if got := string(job.Result()); got != `{"n":1}` {
		t.Errorf("result = %q, want the payload back", got)
	}
}

func TestExecLargeOutputIsTruncated(t *testing.T) {
	t.Parallel()
	h := mustExec(t, exec.Config{Command: []string{"cat"}})
	// Larger than a pipe's buffer too, so stdin and stdout must both flow
	// while the command runs.
	payload := bytes.Repeat([]byte("x"), 1<<20+100_000)
	job := newJob("copy", payload)
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	got := job.Result()
	if len(got) != 1<<20 || !bytes.HasSuffix(got, []byte("[truncated]")) {
		t.Errorf("result is %d bytes ending %q; want 1 MiB ending in [truncated]", len(got), got[max(len(got)-20, 0):])
	}
}

func TestExecEnvironment(t *testing.T) {
	t.Parallel()
	cfg := shell(`printf '%s|%s|%s|%s|%s|%s' "$FENCEQ_JOB_ID" "$FENCEQ_JOB_QUEUE" "$FENCEQ_JOB_KIND" "$FENCEQ_ATTEMPT" "$FENCEQ_FENCING_TOKEN" "$EXTRA"`)
	cfg.Env = []string{"EXTRA=from-config"}
	h := mustExec(t, cfg)
	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-42", Queue: "mail", Kind: "send", Attempt: 2, MaxAttempts: 5, Generation: 9001}})
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if got, want := string(job.Result()), "job-42|mail|send|2|9001|from-config"; got != want {
		t.Errorf("environment seen by the command = %q, want %q", got, want)
	}
}

func TestExecPermanentExitCode(t *testing.T) {
	t.Parallel()
	cfg := shell(`echo "noise" >&2; echo "payload is not an image" >&2; exit 3`)
	cfg.PermanentExitCodes = []int{3}
	h := mustExec(t, cfg)
	job := newJob("resize", nil)
	err := h.ProcessJob(context.Background(), job)
	var perm *handlers.PermanentError
	if !errors.As(err, &perm) {
		t.Fatalf("err = %v, want a *PermanentError", err)
	}
	for _, want := range []string{"exec /bin/sh", "exit 3", "payload is not an image"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
	if job.Result() != nil {
		t.Errorf("result = %q, want none for a failed command", job.Result())
	}
}

func TestExecOtherExitCodeIsRetried(t *testing.T) {
	t.Parallel()
	cfg := shell(`echo "database unreachable" >&2; exit 1`)
	cfg.PermanentExitCodes = []int{3}
	h := mustExec(t, cfg)
	err := h.ProcessJob(context.Background(), newJob("resize", nil))
	if err == nil {
		t.Fatal("err = nil, want the exit status")
	}
	var perm *handlers.PermanentError
	if errors.As(err, &perm) {
		t.Errorf("err = %v is permanent; exit 1 is not listed, so it must be retried", err)
	}
	if !strings.Contains(err.Error(), "exit 1") || !strings.Contains(err.Error(), "database unreachable") {
		t.Errorf("error %q should name the exit code and stderr", err)
	}
}

func TestExecStderrTail(t *testing.T) {
	t.Parallel()
	// 10 KiB of noise, then the line that says what went wrong.
	h := mustExec(t, shell(`i=0; while [ $i -lt 160 ]; do echo "................................................................" >&2; i=$((i+1)); done; echo "the real reason" >&2; exit 1`))
	err := h.ProcessJob(context.Background(), newJob("k", nil))
	if err == nil || !strings.Contains(err.Error(), "the real reason") {
		t.Fatalf("err = %v, want the end of stderr", err)
	}
	if n := len(err.Error()); n > 4<<10+200 {
		t.Errorf("error is %d bytes; stderr should be cut to its last 4 KiB", n)
	}
}

// stderrRecords runs cfg on a job with a JSON logger and answers the log
// records it wrote.
func stderrRecords(t *testing.T, cfg exec.Config) []map[string]any {
	t.Helper()
	var logs bytes.Buffer
	cfg.Logger = slog.New(slog.NewJSONHandler(&logs, nil))
	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-9", Queue: "mail", Kind: "send", Attempt: 2, MaxAttempts: 5, Generation: 11}})
	if err := mustExec(t, cfg).ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	var records []map[string]any
	for line := range bytes.Lines(logs.Bytes()) {
		var r map[string]any
		if err := json.Unmarshal(line, &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		records = append(records, r)
	}
	return records
}

// A command that succeeds and writes warnings has them logged with its job,
// not thrown away; one that writes nothing there logs nothing.
func TestExecStderrOfSuccessIsLogged(t *testing.T) {
	t.Parallel()
	records := stderrRecords(t, shell(`echo "warning: template v1 is deprecated" >&2; echo done`))
	if len(records) != 1 {
		t.Fatalf("%d log records, want 1: %v", len(records), records)
	}
	r := records[0]
	job, _ := r["job"].(map[string]any)
	if r["level"] != "INFO" || r["stderr"] != "warning: template v1 is deprecated" || r["stderr_bytes"] != float64(35) ||
		job["queue"] != "mail" || job["kind"] != "send" || job["id"] != "job-9" || job["attempt"] != float64(2) {
		t.Errorf("record %v", r)
	}
	if records := stderrRecords(t, shell(`echo quiet`)); len(records) != 0 {
		t.Errorf("a command with empty standard error logged %v", records)
	}
}

// A long standard error is logged by its first and last 4 KiB, with the
// number of bytes left out between them.
func TestExecStderrOfSuccessIsCapped(t *testing.T) {
	t.Parallel()
	// A line "first", a line of 20,000 zeros, a line "last".
	records := stderrRecords(t, shell(`echo first >&2; printf '%020000d\n' 0 >&2; echo last >&2`))
	if len(records) != 1 {
		t.Fatalf("%d log records, want 1", len(records))
	}
	text, _ := records[0]["stderr"].(string)
	total := len("first\n") + 20001 + len("last\n")
	if records[0]["stderr_bytes"] != float64(total) {
		t.Errorf("stderr_bytes %v, want %d", records[0]["stderr_bytes"], total)
	}
	note := fmt.Sprintf("[... %d bytes left out ...]", total-8<<10)
	if !strings.HasPrefix(text, "first\n") || !strings.HasSuffix(text, "\nlast") || !strings.Contains(text, note) {
		t.Errorf("logged stderr (%d bytes) does not keep the start, the end and %q:\n%.80s ... %.80s", len(text), note, text, text[max(len(text)-80, 0):])
	}
	if len(text) > 8<<10+len(note)+2 {
		t.Errorf("logged %d bytes of stderr; want at most 8 KiB and the note", len(text))
	}
}

func TestExecKilledBySignalIsRetried(t *testing.T) {
	t.Parallel()
	h := mustExec(t, shell(`kill -KILL $$`))
	err := h.ProcessJob(context.Background(), newJob("k", nil))
	var perm *handlers.PermanentError
	if err == nil || errors.As(err, &perm) || !strings.Contains(err.Error(), "signal") {
		t.Fatalf("err = %v, want a retried error naming the signal", err)
	}
}

func TestExecConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   exec.Config
		field string // of the *handlers.ValidationError
		want  []string
	}{
		{"no command", exec.Config{}, "Command", []string{"command is required"}},
		{"empty name", exec.Config{Command: []string{""}}, "Command", []string{"command is required"}},
		{"not in PATH", exec.Config{Command: []string{"fenceq-no-such-command"}}, "Command",
			[]string{"fenceq-no-such-command", "install it or give a full path"}},
		{"missing path", exec.Config{Command: []string{"/nonexistent/fenceq-tool"}}, "Command",
			[]string{"/nonexistent/fenceq-tool", "install it or give a full path"}},
		{"negative grace", exec.Config{Command: []string{"cat"}, KillGrace: -time.Second}, "KillGrace",
			[]string{"negative"}},
		{"bad env", exec.Config{Command: []string{"cat"}, Env: []string{"NOEQUALS"}}, "Env",
			[]string{"NOEQUALS", "KEY=value"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := exec.New(tt.cfg)
			if err == nil {
				t.Fatalf("New = %v, nil; want an error", h)
			}
			for _, want := range tt.want {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			var ve *handlers.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field || !errors.Is(err, handlers.ErrInvalid) {
				t.Errorf("error %#v; want a *handlers.ValidationError of field %s, wrapping ErrInvalid", err, tt.field)
			}
		})
	}
}

func TestExecRelativeToDir(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "run.sh"), []byte("#!/bin/sh\nprintf ran\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := mustExec(t, exec.Config{Command: []string{"./run.sh"}, Dir: dir})
	job := newJob("k", nil)
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if string(job.Result()) != "ran" {
		t.Errorf("result = %q, want %q", job.Result(), "ran")
	}
}

func TestExecCancelSendsTERM(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := shell(`trap 'echo term > "$1/marker"; exit 0' TERM
echo ready > "$1/ready"
while :; do sleep 0.01; done`, dir)
	// Long enough that a return within it shows TERM did the job.
	cfg.KillGrace = 5 * time.Second
	h := mustExec(t, cfg)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := runAsync(ctx, h, newJob("k", nil))
	waitFile(t, filepath.Join(dir, "ready"), done)
	cancel(handlers.ErrJobCancelled)

	err := waitReturn(t, done, 3*time.Second)
	if !errors.Is(err, handlers.ErrJobCancelled) {
		t.Errorf("err = %v, want it to wrap ErrJobCancelled", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "marker")); string(b) != "term\n" {
		t.Errorf("marker = %q; the TERM trap did not run", b)
	}
}

func TestExecKillsAfterGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := shell(`trap '' TERM
echo ready > "$1/ready"
sleep 30`, dir)
	cfg.KillGrace = 100 * time.Millisecond
	h := mustExec(t, cfg)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := runAsync(ctx, h, newJob("k", nil))
	waitFile(t, filepath.Join(dir, "ready"), done)
	start := time.Now()
	cancel(handlers.ErrLeaseLost)

	err := waitReturn(t, done, 3*time.Second)
	if !errors.Is(err, handlers.ErrLeaseLost) {
		t.Errorf("err = %v, want it to wrap ErrLeaseLost", err)
	}
	if err != nil && !strings.Contains(err.Error(), "SIGKILL") {
		t.Errorf("error %q should say the command was killed", err)
	}
	if took := time.Since(start); took < 100*time.Millisecond || took > 2*time.Second {
		t.Errorf("returned %v after cancellation; want about the 100ms grace", took)
	}
}

func TestExecCancelKillsGrandchildren(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// A shell does not pass TERM on to its children: only a signal to the
	// whole group reaches the background sleep.
	cfg := shell(`sleep 30 &
echo $! > "$1/pid"
wait`, dir)
	h := mustExec(t, cfg)

	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := runAsync(ctx, h, newJob("k", nil))
	pid, err := strconv.Atoi(waitFile(t, filepath.Join(dir, "pid"), done))
	if err != nil {
		t.Fatalf("pid file: %v", err)
	}
	cancel(handlers.ErrJobCancelled)

	if err := waitReturn(t, done, 3*time.Second); !errors.Is(err, handlers.ErrJobCancelled) {
		t.Errorf("err = %v, want it to wrap ErrJobCancelled", err)
	}
	assertGone(t, pid)
}

func TestExecKillsLeftoversAfterExit(t *testing.T) {
	t.Parallel()
	// The background sleep still holds stdout: the handler must neither
	// wait 30s for it nor leave it running.
	h := mustExec(t, shell(`sleep 30 & echo $!`))
	job := newJob("k", nil)
	done := runAsync(context.Background(), h, job)
	if err := waitReturn(t, done, 3*time.Second); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(job.Result())))
	if err != nil {
		t.Fatalf("result %q is not a pid: %v", job.Result(), err)
	}
	assertGone(t, pid)
}

func TestExecContextDoneBeforeStart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	h := mustExec(t, shell(`echo ran > "$1/ran"`, dir))
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(handlers.ErrShutdown)
	if err := h.ProcessJob(ctx, newJob("k", nil)); !errors.Is(err, handlers.ErrShutdown) {
		t.Errorf("err = %v, want it to wrap ErrShutdown", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
		t.Error("the command ran although the context was already done")
	}
}

func TestExecNotExecutable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "notes.txt")
	if err := os.WriteFile(path, []byte("not a program\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := exec.New(exec.Config{Command: []string{path}})
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "cannot run") {
		t.Errorf("err = %v, want one saying %s cannot be run", err, path)
	}
	var ve *handlers.ValidationError
	if !errors.As(err, &ve) || ve.Field != "Command" || ve.Value != path || ve.Err == nil {
		t.Errorf("err = %#v, want a *handlers.ValidationError of Command %s with LookPath's error", err, path)
	}
}

// FENCEQ_GROUP is the job's group, and is set (empty) for a job without
// one, whatever cfg.Env says.
func TestExecGroupEnvironment(t *testing.T) {
	t.Parallel()
	cfg := shell(`printf '%s' "${FENCEQ_GROUP-unset}"`)
	cfg.Env = []string{"FENCEQ_GROUP=from-config"}
	h := mustExec(t, cfg)
	for group, want := range map[string]string{"acme": "acme", "": ""} {
		job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-1", Queue: "mail", Kind: "send", Attempt: 1, MaxAttempts: 5, Generation: 1, Group: group}})
		if err := h.ProcessJob(context.Background(), job); err != nil {
			t.Fatalf("ProcessJob: %v", err)
		}
		if got := string(job.Result()); got != want {
			t.Errorf("group %q: FENCEQ_GROUP seen by the command = %q, want %q", group, got, want)
		}
	}
}
