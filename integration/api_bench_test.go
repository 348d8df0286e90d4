package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/broker"
)

// BenchmarkEnqueueFrom measures enqueue three ways a producer can take,
// from one client and from 50 at once: the Go client (Client.Enqueue),
// the HTTP API (one POST per job, and batches of 100), and `workerd
// enqueue --jsonl` (one process reading b.N lines; 50 processes reading
// b.N/50 each). The API runs in this process on a loopback listener, as
// workerd serves it. Each reports jobs/s.
//
//	FENCEQ_REDIS_ADDR=127.0.0.1:64102 go test -run '^$' -bench EnqueueFrom -benchtime 5000x -count 3 ./integration/
func BenchmarkEnqueueFrom(b *testing.B) {
	ctx := context.Background()
	setup := func(b *testing.B) (*broker.Broker, string) {
		client(b)
		prefix := fmt.Sprintf("fqapibench-%d", time.Now().UnixNano())
		c := redis.NewClient(&redis.Options{Addr: redisAddr, PoolSize: 64})
		b.Cleanup(func() {
			deletePrefixKeys(b, prefix)
			_ = c.Close()
		})
		br, err := broker.New(c, broker.Options{Prefix: prefix})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := br.Client().Enqueue(ctx, broker.Job{Queue: "enq", Kind: "k"}); err != nil {
			b.Fatal(err) // the queue's registration is not per-job work
		}
		return br, prefix
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
	}
	// clients runs n goroutines that together call one b.N times.
	clients := func(b *testing.B, n int, one func() error) {
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for range n {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					if err := one(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		b.StopTimer()
		report(b)
	}
	job := broker.Job{Queue: "enq", Kind: "k", Payload: []byte(`{"n":1}`)}
	for _, n := range []int{1, 50} {
		b.Run(fmt.Sprintf("GoClient/clients=%d", n), func(b *testing.B) {
			br, _ := setup(b)
			clients(b, n, func() error { _, err := br.Client().Enqueue(ctx, job); return err })
		})
	}

	apiServer := func(b *testing.B) (string, *http.Client) {
		br, _ := setup(b)
		s, err := api.New(api.Config{Broker: br, Token: apiToken})
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(s)
		b.Cleanup(srv.Close)
		return srv.URL, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	}
	post := func(hc *http.Client, url, body string, want int) error {
		req, _ := http.NewRequest("POST", url, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		out, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			return fmt.Errorf("POST %s: %d %s", url, resp.StatusCode, out)
		}
		return nil
	}
	for _, n := range []int{1, 50} {
		b.Run(fmt.Sprintf("API/clients=%d", n), func(b *testing.B) {
			url, hc := apiServer(b)
			clients(b, n, func() error { return post(hc, url+"/v1/queues/enq/jobs", `{"kind":"k","payload":{"n":1}}`, 201) })
		})
	}
	const batch = 100
	batchBody := `{"jobs":[` + strings.TrimSuffix(strings.Repeat(`{"kind":"k","payload":{"n":1}},`, batch), ",") + `]}`
	for _, n := range []int{1, 50} {
		b.Run(fmt.Sprintf("APIBatch100/clients=%d", n), func(b *testing.B) {
			url, hc := apiServer(b)
			var next atomic.Int64
			var wg sync.WaitGroup
			b.ResetTimer()
			for range n {
				wg.Go(func() {
					for next.Add(batch) <= int64(b.N)+batch-1 {
						if err := post(hc, url+"/v1/queues/enq/jobs/batch", batchBody, 200); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			report(b) // b.N rounded up to whole batches: at most 99 more jobs than counted
		})
	}

	for _, n := range []int{1, 50} {
		b.Run(fmt.Sprintf("JSONL/processes=%d", n), func(b *testing.B) {
			bin := workerdBin(b)
			_, prefix := setup(b)
			dir := b.TempDir()
			files := make([]string, n)
			for i := range n {
				lines := b.N / n
				if i < b.N%n {
					lines++
				}
				files[i] = filepath.Join(dir, fmt.Sprintf("jobs-%d.jsonl", i))
				if err := os.WriteFile(files[i], bytes.Repeat([]byte(`{"kind":"k","payload":{"n":1}}`+"\n"), lines), 0o644); err != nil {
					b.Fatal(err)
				}
			}
			var wg sync.WaitGroup
			b.ResetTimer()
			for _, f := range files {
				wg.Go(func() {
					out, err := exec.Command(bin, "enqueue", "enq", "--jsonl", f, "--redis", "redis://"+redisAddr, "--prefix", prefix).CombinedOutput()
					if err != nil {
						b.Errorf("workerd enqueue --jsonl: %v\n%.500s", err, out)
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			report(b)
		})
	}
}
