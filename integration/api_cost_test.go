package integration

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/broker"
)

// A job enqueued through the HTTP API costs Redis exactly what
// Client.Enqueue costs: the API adds an HTTP round trip, not a command,
// one by one or in a batch.
func TestAPICostsWhatEnqueueCosts(t *testing.T) {
	admin := startServer(t) // commandstats are server-wide: a server of its own
	ctx := context.Background()
	harness := countCommands(t, admin, func() {})
	rdb := redis.NewClient(&redis.Options{Addr: admin.Options().Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Prefix: "apicost"})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.LoadScripts(ctx); err != nil {
		t.Fatal(err)
	}
	s, err := api.New(api.Config{Broker: b, Token: apiToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	post := func(path, body string, want int) {
		req, _ := http.NewRequest("POST", srv.URL+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+apiToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("POST %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	const n = 500
	for _, q := range []string{"go", "one", "batch"} { // each queue registered before counting
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "noop"}); err != nil {
			t.Fatal(err)
		}
	}
	counts := map[string]map[string]int64{
		"Client.Enqueue": subtract(countCommands(t, admin, func() {
			for i := range n {
				if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "go", Kind: "noop", ID: fmt.Sprint("j", i), Payload: []byte(`{}`)}); err != nil {
					t.Fatal(err)
				}
			}
		}), harness),
		"POST jobs": subtract(countCommands(t, admin, func() {
			for i := range n {
				post("/v1/queues/one/jobs", fmt.Sprintf(`{"kind":"noop","id":"j%d","payload":{}}`, i), 201)
			}
		}), harness),
		"POST jobs/batch": subtract(countCommands(t, admin, func() {
			for k := 0; k < n; k += 100 {
				var jobs []string
				for i := k; i < k+100; i++ {
					jobs = append(jobs, fmt.Sprintf(`{"kind":"noop","id":"j%d","payload":{}}`, i))
				}
				post("/v1/queues/batch/jobs/batch", `{"jobs":[`+strings.Join(jobs, ",")+`]}`, 200)
			}
		}), harness),
	}
	for _, c := range counts { // a new connection's handshake is no job's work
		for name := range c {
			if name == "hello" || strings.HasPrefix(name, "client|") || name == "auth" || name == "select" {
				delete(c, name)
			}
		}
	}
	want := counts["Client.Enqueue"]
	t.Logf("%d jobs each: Client.Enqueue ran %s", n, formatCounts(want))
	for name, got := range counts {
		if !maps.Equal(got, want) {
			t.Errorf("%s ran %s; Client.Enqueue %s", name, formatCounts(got), formatCounts(want))
		}
	}
}
