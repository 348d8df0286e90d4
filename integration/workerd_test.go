package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// workerdBin builds cmd/workerd once per test run.
func workerdBin(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "workerd-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "workerd")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/workerd").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// workerd runs the binary to completion and answers its exit code and
// output.
func workerd(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(workerdBin(t), args...)
	cmd.Stdin = strings.NewReader(stdin)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), o.String(), e.String()
	} else if err != nil {
		t.Fatalf("run workerd %v: %v", args, err)
	}
	return 0, o.String(), e.String()
}

// The end-to-end case: a job enqueued through the CLI runs under
// `workerd run` with an exec handler; the runner is killed with SIGKILL in
// the middle of the job, and everything its command started dies with it,
// even what left the command's process group; a second runner recovers it
// without any restart of the first, and it ends done on attempt 2; check
// is clean.
func TestWorkerdKill9AndRecover(t *testing.T) {
	client(t) // skips (or fails under CI) without Redis
	dir := t.TempDir()
	prefix := fmt.Sprintf("fqe2e-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	redisURL := "redis://" + redisAddr
	common := []string{"--redis", redisURL, "--prefix", prefix}

	script := filepath.Join(dir, "work.sh")
	marker := filepath.Join(dir, "attempt1.pid")
	grandchild, escaped := filepath.Join(dir, "grandchild.pid"), filepath.Join(dir, "setsid.pid")
	writeFile(t, script, `#!/bin/sh
payload=$(cat)
if [ "$FENCEQ_ATTEMPT" = "1" ]; then
  sleep 60 &
  echo $! > `+grandchild+`
  setsid sleep 60 &
  echo $! > `+escaped+`
  echo $$ > `+marker+`
  exec sleep 60   # the runner is killed while this runs
fi
printf '{"attempt":%s,"token":%s,"payload":%s}' "$FENCEQ_ATTEMPT" "$FENCEQ_FENCING_TOKEN" "$payload"
`, 0o755)
	config := filepath.Join(dir, "workerd.yaml")
	writeFile(t, config, `
http: "off"
pools:
  - queues: [e2e]
    concurrency: 2
    lease: 2s
    poll_interval: 100ms
handlers:
  work:
    exec:
      command: [`+script+`]
`, 0o644)

	code, out, errOut := workerd(t, "", append([]string{"enqueue", "e2e", "work", "--payload", `{"n":42}`}, common...)...)
	if code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, errOut)
	}
	id := strings.TrimSpace(out)

	runner := func() *exec.Cmd {
		cmd := exec.Command(workerdBin(t), append([]string{"run", "--config", config, "--log-format", "json"}, common...)...)
		cmd.Stderr = &bytes.Buffer{}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	a := runner()
	pid := waitForFile(t, marker, 20*time.Second)
	if err := a.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = a.Wait()
	pids := map[string]int{"command": pid, "command's child": waitForFile(t, grandchild, time.Second), "command's setsid child": waitForFile(t, escaped, time.Second)}
	for _, pid := range pids {
		t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	}
	// The exec handler's command and all it started die with their
	// runner: left running, they would do the job a second time alongside
	// the retry.
	for what, pid := range pids {
		for deadline := time.Now().Add(5 * time.Second); !processGone(pid); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the killed runner's %s (pid %d) is still running", what, pid)
			}
		}
	}

	b := runner()
	var job struct {
		State      string          `json:"state"`
		Attempt    int             `json:"attempt"`
		Generation int64           `json:"generation"`
		Result     json.RawMessage `json:"result"`
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, errOut = workerd(t, "", append([]string{"inspect", "job", "e2e", id, "--json"}, common...)...)
		if code != 0 {
			t.Fatalf("inspect job: exit %d: %s", code, errOut)
		}
		if err := json.Unmarshal([]byte(out), &job); err != nil {
			t.Fatalf("inspect job --json: %v\n%s", err, out)
		}
		if job.State == "done" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job still %s after 30s; runner B's log:\n%s", job.State, b.Stderr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if job.Attempt != 2 {
		t.Fatalf("done on attempt %d, want 2", job.Attempt)
	}
	var result struct {
		Attempt int   `json:"attempt"`
		Token   int64 `json:"token"`
		Payload struct {
			N int `json:"n"`
		} `json:"payload"`
	}
	if err := json.Unmarshal(job.Result, &result); err != nil || result.Attempt != 2 || result.Payload.N != 42 || result.Token != job.Generation {
		t.Fatalf("result %s (%v); want attempt 2, payload n=42, token = generation %d", job.Result, err, job.Generation)
	}
	code, out, errOut = workerd(t, "", append([]string{"check", "e2e"}, common...)...)
	if code != 0 {
		t.Fatalf("check: exit %d\n%s%s", code, out, errOut)
	}
	_ = b.Process.Signal(syscall.SIGTERM)
	if err := b.Wait(); err != nil {
		t.Fatalf("runner B after SIGTERM: %v\n%s", err, b.Stderr)
	}
}

// Two SIGINTs: the first starts a graceful shutdown that would wait for
// the running job (shutdown_timeout is an hour, and the job's command
// ignores SIGTERM), the second stops workerd at once with exit code 1; the
// job is released, pending again without waiting for its lease, and its
// command dies with workerd.
func TestWorkerdSecondSigintStopsAtOnce(t *testing.T) {
	client(t)
	dir := t.TempDir()
	prefix := fmt.Sprintf("fqsig-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	common := []string{"--redis", redisAddr, "--prefix", prefix} // host:port, no scheme
	script := filepath.Join(dir, "block.sh")
	marker := filepath.Join(dir, "pid")
	writeFile(t, script, "#!/bin/sh\ntrap '' TERM\necho $$ > "+marker+"\nexec sleep 120\n", 0o755)
	config := filepath.Join(dir, "workerd.yaml")
	writeFile(t, config, `
http: "off"
shutdown_timeout: 1h
pools:
  - queues: [sig]
    poll_interval: 100ms
handlers:
  block: {exec: {command: [`+script+`]}}
`, 0o644)
	if code, _, errOut := workerd(t, "", append([]string{"enqueue", "sig", "block", "--id", "b"}, common...)...); code != 0 {
		t.Fatalf("enqueue: exit %d: %s", code, errOut)
	}

	cmd := exec.Command(workerdBin(t), append([]string{"run", "--config", config, "--log-format", "json"}, common...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := make(chan string, 1000)
	var log strings.Builder
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	waitLine := func(s string) {
		t.Helper()
		timeout := time.After(30 * time.Second)
		for {
			select {
			case line, ok := <-lines:
				if !ok {
					t.Fatalf("workerd ended its log without %q:\n%s", s, log.String())
				}
				log.WriteString(line + "\n")
				if strings.Contains(line, s) {
					return
				}
			case <-timeout:
				t.Fatalf("no %q in 30s:\n%s", s, log.String())
			}
		}
	}

	pid := waitForFile(t, marker, 20*time.Second)
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitLine(`"at_most":"1h0m15s"`)
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	waitLine("workerd stopping now (second signal)")
	// workerd's log ends when it exits (and Wait may only follow the end
	// of the reads).
	drained := make(chan struct{})
	go func() {
		for range lines {
		}
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(30 * time.Second):
		t.Fatal("workerd still runs 30s after a second SIGINT")
	}
	var ee *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("workerd after a second SIGINT: %v, want exit code 1", err)
	}
	for deadline := time.Now().Add(5 * time.Second); !processGone(pid); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the job's command (pid %d) outlived workerd", pid)
		}
	}
	code, out, errOut := workerd(t, "", append([]string{"inspect", "job", "sig", "b", "--json"}, common...)...)
	var job struct{ State string }
	if code != 0 || json.Unmarshal([]byte(out), &job) != nil || job.State != "pending" {
		t.Fatalf("the interrupted job: exit %d, %s%s; want it pending (released)", code, out, errOut)
	}
}

// `workerd dev` needs nothing: an embedded Redis, demo jobs, done ones.
func TestWorkerdDev(t *testing.T) {
	t.Parallel()
	code, out, errOut := workerd(t, "", "dev", "--exit-after", "4s")
	if code != 0 {
		t.Fatalf("dev: exit %d\n%s\n%s", code, out, errOut)
	}
	m := regexp.MustCompile(`done +(\d+)`).FindAllStringSubmatch(out, -1)
	if len(m) == 0 {
		t.Fatalf("no counts printed:\n%s", out)
	}
	if n, _ := strconv.Atoi(m[len(m)-1][1]); n == 0 {
		t.Fatalf("no demo job done in 4s:\n%s", out)
	}
	if !strings.Contains(out, "NOT durable") {
		t.Fatalf("no in-memory banner:\n%s", out)
	}
}

// Bad configuration: one clear error naming the file, the field and the
// fix, and exit code 2.
func TestWorkerdBadConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cases := []struct {
		name, yaml string
		want       []string
	}{
		{"UnknownField", "pools:\n  - queues: [a]\n    concurency: 3\nhandlers:\n  k: {exec: {command: [true]}}\n",
			[]string{"line 3", `unknown field "concurency"`}},
		{"BadDuration", "pools:\n  - queues: [a]\n    lease: 30\nhandlers:\n  k: {exec: {command: [true]}}\n",
			[]string{"line 3", `"30" is not a duration`, "30s"}},
		{"MissingCommand", "pools:\n  - queues: [a]\nhandlers:\n  k: {exec: {dir: /tmp}}\n",
			[]string{"handlers.k.exec.command: missing"}},
		{"CommandNotFound", "pools:\n  - queues: [a]\nhandlers:\n  k: {exec: {command: [no-such-program-xyz]}}\n",
			[]string{"handlers.k.exec", "no-such-program-xyz"}},
		{"NoPools", "handlers:\n  k: {exec: {command: [true]}}\n", []string{"pools: none configured"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name+".yaml")
			writeFile(t, path, tc.yaml, 0o644)
			code, _, errOut := workerd(t, "", "run", "--config", path, "--redis", "redis://127.0.0.1:1")
			if code != 2 {
				t.Fatalf("exit %d, want 2: %s", code, errOut)
			}
			for _, w := range append(tc.want, path) {
				if !strings.Contains(errOut, w) {
					t.Fatalf("error does not mention %q:\n%s", w, errOut)
				}
			}
		})
	}
	t.Run("UnreachableRedis", func(t *testing.T) {
		path := filepath.Join(dir, "ok.yaml")
		writeFile(t, path, "pools:\n  - queues: [a]\nhandlers:\n  k: {exec: {command: [true]}}\n", 0o644)
		code, _, errOut := workerd(t, "", "run", "--config", path, "--redis", "redis://127.0.0.1:1")
		if code != 2 || !strings.Contains(errOut, "cannot reach Redis at 127.0.0.1:1") {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
	t.Run("UnknownCommand", func(t *testing.T) {
		if code, _, errOut := workerd(t, "", "frobnicate"); code != 2 || !strings.Contains(errOut, `unknown command "frobnicate"`) {
			t.Fatalf("exit %d: %s", code, errOut)
		}
	})
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// waitForFile waits for a file holding a pid and answers the pid.
func waitForFile(t *testing.T, path string, within time.Duration) int {
	t.Helper()
	for deadline := time.Now().Add(within); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && len(bytes.TrimSpace(b)) > 0 {
			pid, err := strconv.Atoi(string(bytes.TrimSpace(b)))
			if err == nil {
				return pid
			}
		}
	}
	t.Fatalf("%s did not appear within %v", path, within)
	return 0
}

func deletePrefixKeys(t testing.TB, prefix string) {
	c := client(t)
	ctx := context.Background()
	keys, _ := c.Keys(ctx, prefix+":*").Result()
	if len(keys) > 0 {
		c.Del(ctx, keys...)
	}
}

// processGone reports whether pid has exited (a zombie counts: whether one
// is reaped depends on the container's init).
func processGone(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] == "Z"
}

// Several processes enqueueing under one unique key at once make one job,
// and all of them print its id.
func TestWorkerdUniqueAcrossProcesses(t *testing.T) {
	client(t)
	prefix := fmt.Sprintf("fquniq-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	const n = 6
	outs := make(chan string, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, out, errOut := workerd(t, "", "enqueue", "reports", "build", "--unique", "report-2026-11",
				"--redis", "redis://"+redisAddr, "--prefix", prefix)
			if code != 0 {
				t.Errorf("exit %d: %s", code, errOut)
			}
			outs <- strings.TrimSpace(out)
		}()
	}
	wg.Wait()
	close(outs)
	ids := map[string]bool{}
	for id := range outs {
		ids[id] = true
	}
	if len(ids) != 1 {
		t.Fatalf("%d processes printed %d different ids: %v", n, len(ids), ids)
	}
	code, out, _ := workerd(t, "", "inspect", "reports", "--json", "--redis", "redis://"+redisAddr, "--prefix", prefix)
	if code != 0 || !strings.Contains(out, `"pending": 1`) {
		t.Fatalf("inspect: exit %d\n%s", code, out)
	}
}
