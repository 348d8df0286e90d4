package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

const apiToken = "integration-api-token-0123456789"

// python3 answers the interpreter's path. Without one it skips the test,
// or fails it under CI=true: CI has python3, so its absence is a broken
// runner, not a reason to pass.
func python3(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3 not found under CI=true: the Python client test cannot run (%v)", err)
		}
		t.Skipf("SKIP: no python3 (%v)", err)
	}
	return p
}

// runWorkerd starts `workerd run` with config under prefix, and stops it
// (SIGTERM) when the test ends. It answers the process and its log.
func runWorkerd(t *testing.T, config string, prefix string) (*exec.Cmd, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(workerdBin(t), "run", "--config", config, "--redis", "redis://"+redisAddr, "--prefix", prefix, "--log-format", "json", "--log-level", "warn")
	logs := &syncBuffer{} // written by the process's copier, read on failure
	cmd.Stderr = logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return cmd, logs
}

func waitHealthy(t *testing.T, addr string, logs *syncBuffer) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get("http://" + addr + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("workerd at %s not ready within 20s; its log:\n%s", addr, logs)
		}
	}
}

// The end-to-end case: a Python client in the standard library
// alone enqueues 1,000 jobs through the API of a real `workerd run` on a
// real Redis (half one by one, half in batches), sends some again and
// gets the same jobs, waits for every one and reads its result, which a
// worker pool computed through a webhook handler; then cancel, retry and
// the refusals.
func TestPythonClient(t *testing.T) {
	client(t) // skips (or fails under CI) without Redis
	py := python3(t)
	prefix := fmt.Sprintf("fqpy-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })

	// The handler: a web service that adds a and b.
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var p struct{ A, B int }
		if err := json.NewDecoder(r.Body).Decode(&p); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"sum": p.A + p.B, "id": r.Header.Get("Fenceq-Job-Id")})
	}))
	t.Cleanup(hook.Close)

	addr := fmt.Sprintf("127.0.0.1:%d", freePort(t))
	config := filepath.Join(t.TempDir(), "workerd.yaml")
	writeFile(t, config, fmt.Sprintf(`
http: %s
api_token: %s
pools:
  - queues: [py]
    concurrency: 32
    poll_interval: 200ms
handlers:
  add:
    http:
      url: %s
`, addr, apiToken, hook.URL), 0o644)
	_, logs := runWorkerd(t, config, prefix)
	waitHealthy(t, addr, logs)

	cmd := exec.Command(py, "python/fenceq_client.py", "--queue", "py", "--count", "1000", "--batch", "100")
	cmd.Env = append(os.Environ(), "FENCEQ_URL=http://"+addr, "FENCEQ_API_TOKEN="+apiToken)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	start := time.Now()
	if err := cmd.Run(); err != nil {
		t.Fatalf("the Python client failed (%v) after %v:\n%s%s\nworkerd's log:\n%s", err, time.Since(start).Round(time.Millisecond), out.String(), errOut.String(), logs)
	}
	var figures map[string]any
	if err := json.Unmarshal(out.Bytes(), &figures); err != nil || figures["ok"] != true {
		t.Fatalf("the Python client printed %q (%v)", out.String(), err)
	}
	t.Logf("Python client: %s in %v", bytes.TrimSpace(out.Bytes()), time.Since(start).Round(time.Millisecond))

	code, stdout, stderr := workerd(t, "", "check", "py", "--redis", "redis://"+redisAddr, "--prefix", prefix)
	if code != 0 {
		t.Fatalf("check after the Python client: exit %d\n%s%s", code, stdout, stderr)
	}
}
