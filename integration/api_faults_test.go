package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/broker"
)

// The API's promise under a Redis that drops connections and stalls: a
// 201 or 200 is answered only for a job Redis has, a 5xx is always a 503
// (send it again), and sending again after a 503 until an answer comes
// leaves every job stored exactly once, with at most one 201 per id. One
// by one and in batches, from several clients at once.
func TestAPIUnderRedisFaults(t *testing.T) {
	client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("fqapifault-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	proxy := startProxy(t, redisAddr)
	rdb := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond,
		DialTimeout: 300 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.New(api.Config{Broker: b, Token: apiToken, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)

	post := func(path, body string) (int, []byte) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return 0, nil
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}

	var mu sync.Mutex
	created := map[string]int{} // 201s per id
	answered := map[string]bool{}
	unavailable := 0
	note := func(id string, status int) {
		mu.Lock()
		defer mu.Unlock()
		switch status {
		case 201:
			created[id]++
			answered[id] = true
		case 200:
			answered[id] = true
		case 503:
			unavailable++
		}
	}

	stop := make(chan struct{})
	faults := make(chan int)
	go func() { // the faults: a drop, then a stall, over and over
		n := 0
		defer func() { faults <- n }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(120 * time.Millisecond):
			}
			if n%2 == 0 {
				proxy.drop()
			} else {
				proxy.stall(1500 * time.Millisecond) // longer than the broker's own re-sends
			}
			n++
		}
	}()

	const clients, perClient = 6, 60
	var wg sync.WaitGroup
	for c := range clients {
		wg.Go(func() {
			for i := 0; i < perClient; i++ {
				time.Sleep(40 * time.Millisecond) // spread over the faults: a few seconds in all
				id := fmt.Sprintf("c%d-%d", c, i)
				if i%20 == 0 && i+10 <= perClient { // every twentieth starts a batch of ten
					var jobs []string
					ids := make([]string, 10)
					for k := range 10 {
						ids[k] = fmt.Sprintf("c%d-%d", c, i+k)
						jobs = append(jobs, fmt.Sprintf(`{"id":%q,"kind":"k"}`, ids[k]))
					}
					for try := 0; ; try++ {
						status, out := post("/v1/queues/f/jobs/batch", `{"jobs":[`+strings.Join(jobs, ",")+`]}`)
						if status != 200 && status != 503 {
							t.Errorf("batch: %d %s", status, out)
							return
						}
						var r struct {
							Jobs []struct{ Status int }
						}
						if err := json.Unmarshal(out, &r); err != nil || len(r.Jobs) != 10 {
							t.Errorf("batch answer %s (%v)", out, err)
							return
						}
						var again []string
						for k, it := range r.Jobs {
							note(ids[k], it.Status)
							if it.Status == 503 {
								again = append(again, jobs[k])
							} else if it.Status != 200 && it.Status != 201 {
								t.Errorf("batch item %s: %d", ids[k], it.Status)
							}
						}
						if len(again) == 0 {
							break
						}
						if try > 50 {
							t.Errorf("batch still failing after 50 sends")
							return
						}
						jobs = again // send only the failed ones again, with their ids
						ids = ids[:0]
						for _, j := range again {
							var v struct{ ID string }
							_ = json.Unmarshal([]byte(j), &v)
							ids = append(ids, v.ID)
						}
						time.Sleep(50 * time.Millisecond)
					}
					i += 9
					continue
				}
				for try := 0; ; try++ {
					status, out := post("/v1/queues/f/jobs", fmt.Sprintf(`{"id":%q,"kind":"k"}`, id))
					note(id, status)
					if status == 200 || status == 201 {
						break
					}
					if status != 503 || try > 50 {
						t.Errorf("enqueue %s: %d %s (send %d)", id, status, out, try+1)
						return
					}
					time.Sleep(50 * time.Millisecond)
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	n := <-faults

	// Read what Redis holds, past the proxy.
	direct, err := broker.New(client(t), broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	for c := range clients {
		for i := range perClient {
			id := fmt.Sprintf("c%d-%d", c, i)
			if !answered[id] {
				t.Errorf("job %s was never answered 200 or 201", id)
			}
			if created[id] > 1 {
				t.Errorf("job %s was answered 201 %d times", id, created[id])
			}
			if _, err := direct.Inspector().Job(ctx, "f", id); err != nil {
				t.Errorf("job %s answered, but Redis does not have it: %v", id, err)
			}
		}
	}
	counts, err := direct.Inspector().Counts(ctx, "f")
	if err != nil || counts.Pending != clients*perClient {
		t.Fatalf("pending %d (%v), want %d: a job stored twice or lost", counts.Pending, err, clients*perClient)
	}
	t.Logf("%d jobs from %d clients under %d faults: %d answers of 503, each sent again until answered", clients*perClient, clients, n, unavailable)
	if unavailable == 0 {
		t.Log("no 503 at all: the faults did not reach a request this run")
	}
}
