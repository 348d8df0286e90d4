package dashboard_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/dashboard"
)

// TestLiveJobReadsNoPayload: a job's page polls its live figures every
// 2 s (state, attempt, generation, lease, finish time, the start of the
// last error, renewals), and the force-release page shows the job's state
// and lease: neither shows the payload, so neither reads it. A running job
// with a 1 MiB payload moves a few KiB from Redis per poll, not 1 MiB.
func TestLiveJobReadsNoPayload(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "big", ID: "j1", Kind: "resize", Payload: bytes.Repeat([]byte("p"), 1<<20)}); err != nil {
		t.Fatal(err)
	}
	if res, err := b.Leases().Claim(ctx, "big", 1, time.Minute); err != nil || len(res.Leases) != 1 {
		t.Fatalf("claim: %v", err)
	}
	d, err := dashboard.New(dashboard.Config{Inspector: b.Inspector(), Token: token})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	if err := b.LoadScripts(ctx); err != nil { // not counted: an EVAL sends a script's source
		t.Fatal(err)
	}
	count := &replyBytes{}
	c.AddHook(count)
	for _, path := range []string{"/ui/live?queue=big&job=j1", "/ui/queues/big/jobs/j1/release", "/ui/job?queue=big&id=j1&view=release"} {
		count.n.Store(0)
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !bytes.Contains(body, []byte("running")) {
			t.Fatalf("GET %s answered %d without the job's state:\n%s", path, resp.StatusCode, body)
		}
		if got, most := count.n.Load(), int64(16<<10); got > most {
			t.Errorf("GET %s read %d KiB from Redis to answer %d bytes; want at most %d KiB: it reads the 1 MiB payload it does not show", path, got>>10, len(body), most>>10)
		}
	}
}
