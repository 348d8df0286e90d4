package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// lineWatch is a log writer a test can wait on, line by line.
type lineWatch struct {
	mu    sync.Mutex
	all   bytes.Buffer
	part  []byte
	lines chan string
}

func newLineWatch() *lineWatch { return &lineWatch{lines: make(chan string, 10_000)} }

func (w *lineWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.all.Write(p)
	w.part = append(w.part, p...)
	for {
		i := bytes.IndexByte(w.part, '\n')
		if i < 0 {
			return len(p), nil
		}
		w.lines <- string(w.part[:i])
		w.part = w.part[i+1:]
	}
}

func (w *lineWatch) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.all.String()
}

// wait answers the first line from now on that contains s.
func (w *lineWatch) wait(t *testing.T, s string) string {
	t.Helper()
	timeout := time.After(30 * time.Second) // a hang, not a slow machine
	for {
		select {
		case line := <-w.lines:
			if strings.Contains(line, s) {
				return line
			}
		case <-timeout:
			t.Fatalf("no log line with %q in 30s; the log:\n%s", s, w.String())
		}
	}
}

// A first signal makes run say how long it may take and that a second
// one stops at once; the second stops it without waiting for the running
// job (shutdown_timeout is an hour): the job is released, pending again
// for another worker, and run exits 1.
func TestRunSecondSignalStopsAtOnce(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "started")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := writeConfig(t, fmt.Sprintf(`
http: "off"
shutdown_timeout: 1h
pools:
  - queues: [q]
    poll_interval: 20ms
handlers:
  block:
    exec: {command: [/bin/sh, -c, 'echo running > "$0"; exec sleep 3600', %q]}
  warn:
    exec: {command: [/bin/sh, -c, 'echo "careful: disk 91%% full" >&2']}
`, fifo))

	sigs := make(chan os.Signal) // unbuffered: a send returns once interrupts has it
	reset := make(chan struct{})
	ctx, hurry := interrupts(context.Background(), sigs, func() { close(reset) })
	logs := newLineWatch()
	done := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: logs, getenv: func(string) string { return "" }, hurry: hurry}
		done <- run(ctx, e, []string{"run", "--config", cfg, "--redis", c.url, "--log-format", "json"})
	}()

	// An exec job that succeeds has its standard error logged with it.
	c.ok("", "enqueue", "q", "warn", "--id", "w")
	var rec struct {
		Stderr string `json:"stderr"`
		Job    struct{ Queue, Kind, ID string }
	}
	if err := json.Unmarshal([]byte(logs.wait(t, "exec command succeeded and wrote to standard error")), &rec); err != nil ||
		rec.Stderr != "careful: disk 91% full" || rec.Job.Queue != "q" || rec.Job.Kind != "warn" || rec.Job.ID != "w" {
		t.Fatalf("stderr record %+v (%v)", rec, err)
	}

	c.ok("", "enqueue", "q", "block", "--id", "b")
	if _, err := os.ReadFile(fifo); err != nil { // returns once the handler's command runs
		t.Fatal(err)
	}
	sigs <- os.Interrupt
	line := logs.wait(t, "workerd shutting down")
	var first struct {
		Msg    string `json:"msg"`
		Reason string `json:"reason"`
		AtMost string `json:"at_most"`
	}
	if err := json.Unmarshal([]byte(line), &first); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(first.Msg, "second SIGINT or SIGTERM (Ctrl-C) stops at once") || first.Reason != "received interrupt" ||
		first.AtMost != "1h0m15s" { // shutdown_timeout, 10s for the pools to cancel and release, 5s for the endpoints
		t.Fatalf("first signal's log line: %s", line)
	}
	select {
	case code := <-done:
		t.Fatalf("run exited %d after one signal, with its job still running:\n%s", code, logs.String())
	default:
	}

	sigs <- syscall.SIGTERM
	logs.wait(t, "workerd stopping now (second signal)")
	select {
	case code := <-done:
		if code != 1 {
			t.Fatalf("run exited %d after a second signal, want 1:\n%s", code, logs.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("run still waits after a second signal:\n%s", logs.String())
	}
	<-reset // the third signal is the system's again
	if !strings.Contains(logs.String(), "stopped by a second signal before the running jobs finished") {
		t.Errorf("no closing error:\n%s", logs.String())
	}
	if j := c.job("q", "b"); j.State != "pending" {
		t.Errorf("the interrupted job is %s, want pending (released for another worker): %+v", j.State, j)
	}
	close(sigs)
	t.Log(logs.String())
}
