package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// TestChaos runs K `workerd run` processes over one Redis while a fault
// driver kills workers with SIGKILL, freezes them with SIGSTOP for longer
// than their lease, pauses Redis (CLIENT PAUSE), restarts Redis (SIGKILL,
// AOF with appendfsync always) and breaks the network (a proxy that drops
// or stalls connections). Every handler run logs (job id, generation,
// its parent's pid, start/end; the parent is the command's supervisor).
// At the end every acknowledged job must be done once, with a result
// written by the claim that was valid when it was stored, and `workerd
// check` must be clean. It prints one line:
//
//	chaos: jobs=N kills=K pauses=P redis_restarts=R proxy_faults=F lost=0 stale_accepted=0 stale_rejected=S reexecuted=D
//
// FENCEQ_CHAOS_DURATION sets the fault window (default 40s: the CI variant).
func TestChaos(t *testing.T) {
	client(t) // skips (or fails under CI) without Redis
	window := chaosWindow(t, 40*time.Second)
	c := newChaos(t)
	c.startWorkers(3)

	ctx, stopProducing := context.WithCancel(context.Background())
	var producing sync.WaitGroup
	producing.Add(1)
	go func() { defer producing.Done(); c.produce(ctx, 15) }()

	end := time.Now().Add(window)
	for time.Now().Before(end) {
		time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		c.fault()
	}
	stopProducing()
	producing.Wait()
	c.heal()
	c.waitAllDone(90*time.Second, len(c.ids))
	c.verify()
}

// chaosWindow is the fault window: FENCEQ_CHAOS_DURATION, else def.
func chaosWindow(t *testing.T, def time.Duration) time.Duration {
	v := os.Getenv("FENCEQ_CHAOS_DURATION")
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("FENCEQ_CHAOS_DURATION=%q: %v", v, err)
	}
	return d
}

type chaos struct {
	t       *testing.T
	queue   string
	dir     string
	redis   *chaosRedis
	proxy   *faultProxy
	admin   *redis.Client
	b       *broker.Broker
	prefix  string
	config  string
	runLog  string
	mu      sync.Mutex
	workers []*chaosWorker
	stopped map[int]bool // workers frozen with SIGSTOP
	ids     []string     // jobs whose enqueue was acknowledged
	counts  struct{ kills, pauses, restarts, proxyFaults atomic.Int64 }
}

// chaosRedis is a private redis-server with AOF (appendfsync always) that
// the test can kill and start again on the same port and directory.
type chaosRedis struct {
	t    *testing.T
	port int
	dir  string
	cmd  *exec.Cmd
}

func (r *chaosRedis) start() {
	r.t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			r.t.Fatalf("redis-server not installed: %v", err)
		}
		r.t.Skipf("SKIP: redis-server not installed: %v", err)
	}
	r.cmd = exec.Command(path, "--port", strconv.Itoa(r.port), "--bind", "127.0.0.1", "--dir", r.dir,
		"--appendonly", "yes", "--appendfsync", "always", "--save", "")
	if err := r.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr()})
	defer c.Close()
	for deadline := time.Now().Add(20 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			r.t.Fatalf("redis-server on %d did not come back", r.port)
		}
	}
}

func (r *chaosRedis) addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

func (r *chaosRedis) kill() {
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
}

// newChaos is the ungrouped run: queue chaos, four slots a worker, each
// job an exec handler that logs its run to runs.log.
func newChaos(t *testing.T) *chaos {
	c := newChaosServer(t, "chaos")
	script := filepath.Join(c.dir, "job.sh")
	writeFile(t, script, `#!/bin/sh
cat > /dev/null
echo "$FENCEQ_JOB_ID $FENCEQ_FENCING_TOKEN $PPID start" >> `+c.runLog+`
sleep 0.$(( $$ % 5 + 2 ))
echo "$FENCEQ_JOB_ID $FENCEQ_FENCING_TOKEN $PPID end" >> `+c.runLog+`
printf '{"generation":%s,"pid":%s}' "$FENCEQ_FENCING_TOKEN" "$PPID"
`, 0o755)
	c.writeConfig(4, fmt.Sprintf(`  work:
    exec:
      command: [%s]
      kill_grace: 500ms
`, script))
	return c
}

// newChaosServer starts the run's Redis and proxy; writeConfig then
// writes the workers' configuration.
func newChaosServer(t *testing.T, queue string) *chaos {
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	r := &chaosRedis{t: t, port: port, dir: dir}
	r.start()
	t.Cleanup(r.kill)

	c := &chaos{t: t, queue: queue, dir: dir, redis: r, proxy: startProxy(t, r.addr()), prefix: "chaos", stopped: map[int]bool{},
		runLog: filepath.Join(dir, "runs.log")}
	c.admin = redis.NewClient(&redis.Options{Addr: r.addr(), MaxRetries: -1})
	t.Cleanup(func() { _ = c.admin.Close() })
	if c.b, err = broker.New(c.admin, broker.Options{Prefix: c.prefix}); err != nil {
		t.Fatal(err)
	}
	return c
}

// writeConfig writes the workers' configuration: one pool on c.queue of
// concurrency slots, a lease of 1 s, polling every 100 ms, and handlers
// (the YAML under "handlers:", indented by two).
func (c *chaos) writeConfig(concurrency int, handlers string) {
	c.config = filepath.Join(c.dir, "workerd.yaml")
	writeFile(c.t, c.config, fmt.Sprintf(`
redis: redis://%s
prefix: %s
http: "off"
shutdown_timeout: 2s
pools:
  - queues: [%s]
    concurrency: %d
    lease: 1s
    poll_interval: 100ms
    backoff: {base: 100ms, max: 1s}
handlers:
%s`, c.proxy.Addr(), c.prefix, c.queue, concurrency, handlers), 0o644)
}

// chaosWorker is one `workerd run` process; its own goroutine waits for it.
type chaosWorker struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (w *chaosWorker) signal(s syscall.Signal) { _ = w.cmd.Process.Signal(s) }

func (w *chaosWorker) alive() bool {
	select {
	case <-w.exited:
		return false
	default:
		return true
	}
}

func (c *chaos) startWorkers(n int) {
	for range n {
		c.workers = append(c.workers, c.spawn(len(c.workers)))
	}
	c.t.Cleanup(func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		for i, w := range c.workers {
			if c.stopped[i] {
				w.signal(syscall.SIGCONT)
			}
			w.signal(syscall.SIGKILL)
			<-w.exited
		}
	})
}

// spawn starts worker i, its log appended to worker-i.log.
func (c *chaos) spawn(i int) *chaosWorker {
	f, err := os.OpenFile(filepath.Join(c.dir, fmt.Sprintf("worker-%d.log", i)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	cmd := exec.Command(workerdBin(c.t), "run", "--config", c.config, "--log-format", "json")
	cmd.Stderr, cmd.Stdout = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlive a killed test
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	w := &chaosWorker{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); _ = f.Close(); close(w.exited) }()
	return w
}

// produce enqueues jobs at about perSecond, each under an id of its own so
// that an enqueue retried after a fault cannot make a second job.
func (c *chaos) produce(ctx context.Context, perSecond int) {
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	for n := 0; ; n++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		id := fmt.Sprintf("job-%05d", n)
		for {
			_, err := c.b.Client().Enqueue(context.Background(), broker.Job{Queue: c.queue, Kind: "work", ID: id, MaxAttempts: 1000})
			if err == nil || errors.Is(err, broker.ErrJobExists) {
				c.mu.Lock()
				c.ids = append(c.ids, id)
				c.mu.Unlock()
				break
			}
			time.Sleep(50 * time.Millisecond) // Redis restarting or paused: the same id again
		}
	}
}

// fault injects one fault at random.
func (c *chaos) fault() {
	c.mu.Lock()
	i := rand.IntN(len(c.workers))
	w, frozen := c.workers[i], c.stopped[i]
	c.mu.Unlock()
	switch rand.IntN(6) {
	case 0, 1: // kill -9 a worker; start a new one soon after
		if frozen {
			return
		}
		w.signal(syscall.SIGKILL)
		c.counts.kills.Add(1)
		go func() {
			time.Sleep(time.Duration(200+rand.IntN(1500)) * time.Millisecond)
			c.mu.Lock()
			defer c.mu.Unlock()
			c.workers[i] = c.spawn(i)
		}()
	case 2: // freeze a worker for longer than its lease: a long GC pause
		if frozen {
			return
		}
		c.mu.Lock()
		c.stopped[i] = true
		c.mu.Unlock()
		w.signal(syscall.SIGSTOP)
		c.counts.pauses.Add(1)
		go func() {
			time.Sleep(time.Duration(1500+rand.IntN(1500)) * time.Millisecond)
			c.mu.Lock()
			defer c.mu.Unlock()
			c.workers[i].signal(syscall.SIGCONT)
			delete(c.stopped, i)
		}()
	case 3: // pause every Redis client
		ms := 300 + rand.IntN(1700)
		if c.admin.Do(context.Background(), "CLIENT", "PAUSE", ms, "ALL").Err() == nil {
			c.counts.pauses.Add(1)
		}
	case 4: // kill Redis and start it again from its AOF
		c.redis.kill()
		time.Sleep(time.Duration(100+rand.IntN(700)) * time.Millisecond)
		c.redis.start()
		c.counts.restarts.Add(1)
	case 5: // break the network between workers and Redis
		if rand.IntN(2) == 0 {
			c.proxy.drop()
		} else {
			c.proxy.stall(time.Duration(300+rand.IntN(1700)) * time.Millisecond)
		}
		c.counts.proxyFaults.Add(1)
	}
}

// heal ends every fault in progress: frozen workers resume, dead ones are
// replaced.
func (c *chaos) heal() {
	time.Sleep(3 * time.Second) // let pending restarts and SIGCONTs happen
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, w := range c.workers {
		if c.stopped[i] {
			w.signal(syscall.SIGCONT)
			delete(c.stopped, i)
		}
		if !w.alive() { // gone and not replaced
			c.workers[i] = c.spawn(i)
		}
	}
}

// waitAllDone waits until nothing is pending, scheduled or running and n
// jobs are done.
func (c *chaos) waitAllDone(within time.Duration, n int) {
	deadline := time.Now().Add(within)
	for {
		counts, err := c.b.Inspector().Counts(context.Background(), c.queue)
		if err == nil && counts.Pending+counts.Scheduled+counts.Running == 0 && counts.Done >= int64(n) {
			return
		}
		if time.Now().After(deadline) {
			c.t.Logf("not all jobs finished within %v: %+v (of %d)", within, counts, n)
			return // verify reports what is missing
		}
		time.Sleep(200 * time.Millisecond)
	}
}

type run struct {
	gen   int64
	pid   int
	ended bool
}

func (c *chaos) verify() {
	t := c.t
	runs := map[string][]*run{}
	f, err := os.Open(c.runLog)
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(f)
	starts := 0
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) != 4 {
			continue
		}
		gen, _ := strconv.ParseInt(fs[1], 10, 64)
		pid, _ := strconv.Atoi(fs[2])
		switch fs[3] {
		case "start":
			starts++
			runs[fs[0]] = append(runs[fs[0]], &run{gen: gen, pid: pid})
		case "end":
			for _, r := range runs[fs[0]] {
				if r.gen == gen {
					r.ended = true
				}
			}
		}
	}
	_ = f.Close()

	lost, staleAccepted, reexecuted := 0, 0, 0
	for _, id := range c.ids {
		j, err := c.b.Inspector().Job(context.Background(), c.queue, id)
		if err != nil || j.State != broker.StateDone {
			lost++
			t.Errorf("job %s: %v, state %s, last error %q", id, err, j.State, j.LastError)
			continue
		}
		var res struct {
			Generation int64 `json:"generation"`
			PID        int   `json:"pid"`
		}
		if err := json.Unmarshal(j.Result, &res); err != nil {
			staleAccepted++
			t.Errorf("job %s: result %q is not a run's output", id, j.Result)
			continue
		}
		// The stored result must be the output of a run that finished
		// under the claim the job still records: ack is fenced by that
		// claim, and nothing moves a done job's generation.
		valid := false
		for _, r := range runs[id] {
			if r.gen == res.Generation && r.pid == res.PID && r.ended && r.gen == j.Generation {
				valid = true
			}
		}
		if !valid {
			staleAccepted++
			t.Errorf("job %s: stored result %s is not from its valid claim (generation %d; runs %v)", id, j.Result, j.Generation, runs[id])
		}
		if len(runs[id]) > 1 {
			reexecuted++
		}
	}
	staleRejected := 0
	logs, _ := filepath.Glob(filepath.Join(c.dir, "worker-*.log"))
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		staleRejected += bytes.Count(b, []byte("stale settlement rejected"))
	}
	c.workerdCheck()
	line := fmt.Sprintf("chaos: jobs=%d kills=%d pauses=%d redis_restarts=%d proxy_faults=%d lost=%d stale_accepted=%d stale_rejected=%d reexecuted=%d",
		len(c.ids), c.counts.kills.Load(), c.counts.pauses.Load(), c.counts.restarts.Load(), c.counts.proxyFaults.Load(),
		lost, staleAccepted, staleRejected, reexecuted)
	t.Log(line)
	fmt.Println(line)
	if lost > 0 || staleAccepted > 0 {
		t.Fatalf("%s\n(handler runs: %d starts)", line, starts)
	}
}

// workerdCheck runs `workerd check` on the run's queue: it must be clean.
func (c *chaos) workerdCheck() {
	out, _ := exec.Command(workerdBin(c.t), "check", c.queue, "--redis", "redis://"+c.redis.addr(), "--prefix", c.prefix).CombinedOutput()
	if !strings.Contains(string(out), "ok: 1 queue") {
		c.t.Errorf("workerd check:\n%s", out)
	}
}
