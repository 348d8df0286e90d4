package integration

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/dashboard"
)

// BenchmarkDashboardPages times each dashboard page against a queue of a
// million jobs on a private redis-server: the handler's whole work, Redis
// round trips included, through httptest. Each page reports the median of
// its requests (ms-median/op) beside the mean.
//
//	go test ./integration/ -run '^$' -bench BenchmarkDashboardPages -benchtime 50x
func BenchmarkDashboardPages(b *testing.B) {
	c := privateRedis(b)
	br, err := broker.New(c, broker.Options{})
	if err != nil {
		b.Fatal(err)
	}
	const queue, n = "big", 1_000_000
	start := time.Now()
	fillQueue(b, br, queue, n)
	ctx := context.Background()
	// Some running leases, some of them expired and not reaped (no pool
	// runs here), a few dead jobs: every page has something to show.
	if _, err := br.Leases().Claim(ctx, queue, 500, time.Hour); err != nil {
		b.Fatal(err)
	}
	expired, err := br.Leases().Claim(ctx, queue, 200, time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	for _, l := range expired.Leases[:50] {
		if _, err := br.Leases().Fail(ctx, l, broker.Failure{Error: "boom", Dead: true}); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("filled %d jobs in %v", n, time.Since(start).Round(time.Millisecond))
	d, err := dashboard.New(dashboard.Config{Inspector: br.Inspector(), Token: "bench-admin-token-0123", AllowedHosts: []string{"example.com"}}) // httptest.NewRequest's Host
	if err != nil {
		b.Fatal(err)
	}
	first, err := br.Inspector().JobPage(ctx, queue, broker.JobQuery{State: broker.StatePending, Limit: 50})
	if err != nil || first.Next == "" {
		b.Fatalf("first page: %v", err)
	}
	mid := fmt.Sprintf("img-%07d", n/2)
	for _, p := range []struct{ name, path string }{
		{"overview", "/ui/"},
		{"queue-pending-first", "/ui/queues/big"},
		{"queue-pending-next", "/ui/queues/big?state=pending&after=" + first.Next},
		{"queue-pending-newest", "/ui/queues/big?state=pending&order=newest"},
		{"queue-kind-matching-nothing", "/ui/queues/big?state=pending&kind=nothing"},
		{"queue-id-prefix", "/ui/queues/big?state=pending&prefix=img-05"},
		{"queue-dead", "/ui/queues/big?state=dead"},
		{"job", "/ui/queues/big/jobs/" + mid},
		{"job-running", "/ui/queues/big/jobs/img-0000000"},
		{"leases", "/ui/queues/big/leases"},
		{"live-overview", "/ui/live"},
		{"live-job", "/ui/live?queue=big&job=" + mid},
	} {
		b.Run(p.name, func(b *testing.B) {
			took := make([]time.Duration, 0, b.N)
			for b.Loop() {
				rec := httptest.NewRecorder()
				t0 := time.Now()
				d.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, p.path, nil))
				took = append(took, time.Since(t0))
				if rec.Code != http.StatusOK {
					b.Fatalf("GET %s: %d\n%s", p.path, rec.Code, rec.Body.String())
				}
			}
			slices.Sort(took)
			b.ReportMetric(float64(took[len(took)/2].Microseconds())/1000, "ms-median/op")
		})
	}
}

// fillQueue enqueues n jobs through EnqueueMany, 1,000 a pipeline, from
// four goroutines: the jobs are exactly what an application's enqueues
// write (the scripts' own hashes and index entries), only sent faster.
func fillQueue(b *testing.B, br *broker.Broker, queue string, n int) {
	const batch, workers = 1000, 4
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var failed error
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			jobs := make([]broker.Job, batch)
			for start := range next {
				for i := range jobs {
					jobs[i] = broker.Job{Queue: queue, Kind: "resize", ID: fmt.Sprintf("img-%07d", start+i), Payload: []byte(`{"w":640}`)}
				}
				for _, e := range br.Client().EnqueueMany(context.Background(), jobs) {
					if e.Err != nil {
						once.Do(func() { failed = e.Err })
					}
				}
			}
		}()
	}
	for start := 0; start < n; start += batch {
		next <- start
	}
	close(next)
	wg.Wait()
	if failed != nil {
		b.Fatal(failed)
	}
}

// privateRedis starts a redis-server of the benchmark's own, so that a
// million jobs neither burden nor are disturbed by the shared server.
func privateRedis(b *testing.B) *redis.Client {
	b.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			b.Fatalf("redis-server not installed: %v", err)
		}
		b.Skipf("SKIP: redis-server not installed: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()
	cmd := exec.Command(path, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", b.TempDir())
	if err := cmd.Start(); err != nil {
		b.Fatalf("start redis-server: %v", err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	b.Cleanup(func() { _ = c.Close() })
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("redis-server on port %d did not answer", port)
		}
	}
	return c
}
