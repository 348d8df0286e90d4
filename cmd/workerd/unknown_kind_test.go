package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A job of a kind missing from workerd.yaml's handlers is given back
// uncharged with the pool's unknown_kind settings, counted as given back
// and not as a handler run, and dead after dead_after with what to do.
func TestRunGivesBackUnknownKind(t *testing.T) {
	c := newCLI(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := filepath.Join(t.TempDir(), "workerd.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`
http: %s
pools:
  - queues: [q]
    poll_interval: 20ms
    unknown_kind: {delay: 50ms, max_delay: 100ms, dead_after: 300ms}
handlers:
  k:
    exec: {command: ["true"]}
`, addr)), 0o644)
	c.ok("", "enqueue", "q", "other", "--id", "j1", "--max-attempts", "1")

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	errOut := &uiOutput{} // written by the pool while the test reads it
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: errOut, getenv: func(string) string { return "" }}
		done <- run(ctx, e, []string{"run", "--config", cfg, "--redis", c.url, "--log-format", "json"})
	}()
	for deadline := time.Now().Add(10 * time.Second); c.job("q", "j1").State != "dead"; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("job not dead: %+v\n%s", c.job("q", "j1"), errOut.String())
		}
	}
	j := c.job("q", "j1")
	if j.Attempt != 1 || !strings.Contains(j.LastError, `no pool registered kind "other"`) || !strings.Contains(j.LastError, "workerd retry q j1") {
		t.Fatalf("dead job: attempt %d, last error %q", j.Attempt, j.LastError)
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(b)
	if !regexp.MustCompile(`fenceq_jobs_given_back_total\{[^}]*\} [1-9]`).MatchString(metrics) || strings.Contains(metrics, `kind="other"`) {
		t.Fatalf("/metrics should count give-backs and hold no label of the unknown kind:\n%s", metrics)
	}
	if n := strings.Count(errOut.String(), "fenceq has no handler for a job's kind"); n != 1 {
		t.Fatalf("warned %d times, want once:\n%s", n, errOut.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("run exited %d\n%s", code, errOut.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("run did not stop")
	}
}
