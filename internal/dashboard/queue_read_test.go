package dashboard_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/dashboard"
)

// replyBytes counts what a client's commands carry, arguments and replies
// (cmd.String() holds both): about what crossed the wire.
type replyBytes struct{ n atomic.Int64 }

func (c *replyBytes) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *replyBytes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		c.n.Add(int64(len(cmd.String())))
		return err
	}
}
func (c *replyBytes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			c.n.Add(int64(len(cmd.String())))
		}
		return err
	}
}

// TestQueuePageReadsNoPayloads: a queue's page shows each job's id, kind,
// attempt, time and the start of its last error, and reads no more: a
// page of 20 dead jobs with 256 KiB payloads and 4 KiB errors moves a few
// KiB from Redis, not 5 MiB.
func TestQueuePageReadsNoPayloads(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	payload := bytes.Repeat([]byte("p"), 256<<10)
	msg := "upstream refused: " + strings.Repeat("x", 4<<10)
	const n = 20
	for range n {
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "big", Kind: "resize", Payload: payload, MaxAttempts: 1}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := b.Leases().Claim(ctx, "big", n, time.Minute)
	if err != nil || len(res.Leases) != n {
		t.Fatalf("claim: %v", err)
	}
	for _, l := range res.Leases {
		if _, err := b.Leases().Fail(ctx, l, broker.Failure{Error: msg, Dead: true}); err != nil {
			t.Fatal(err)
		}
	}
	d, err := dashboard.New(dashboard.Config{Inspector: b.Inspector()})
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
	resp, err := http.Get(srv.URL + "/ui/queues/big?state=dead")
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	_, _ = page.ReadFrom(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.Count(page.String(), "upstream refused: xxx") != n {
		t.Fatalf("the queue page answered %d without its %d jobs' errors", resp.StatusCode, n)
	}
	if got, most := count.n.Load(), int64(64<<10); got > most {
		t.Fatalf("the queue page of %d jobs read %d KiB from Redis; want at most %d KiB: it reads payloads or whole errors it does not show", n, got>>10, most>>10)
	}
}
