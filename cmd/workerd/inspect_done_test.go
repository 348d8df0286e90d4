package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// inspect's "done in the last minute" counts what finished, not what
// retention kept of it: 50 jobs done with at most 10 kept is 50.
func TestInspectDoneLastMinuteAfterRetention(t *testing.T) {
	c := newCLI(t)
	rdb := redis.NewClient(&redis.Options{Addr: c.mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	at := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC) // the middle of a minute
	c.mr.SetTime(at)
	jobs := make([]broker.Job, 50)
	for i := range jobs {
		jobs[i] = broker.Job{Queue: "mail", Kind: "welcome"}
	}
	for _, e := range b.Client().EnqueueMany(ctx, jobs) {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
	}
	res, err := b.Leases().Claim(ctx, "mail", 50, time.Minute)
	if err != nil || len(res.Leases) != 50 {
		t.Fatalf("claim: %d leases, %v", len(res.Leases), err)
	}
	acks := make([]broker.Ack, len(res.Leases))
	for i, l := range res.Leases {
		acks[i] = broker.Ack{Lease: l}
	}
	if _, err := b.Leases().AckMany(ctx, acks); err != nil {
		t.Fatal(err)
	}
	c.mr.SetTime(at.Add(broker.ResendHorizon + time.Second)) // retention spares the jobs until then
	if _, err := b.Leases().Trim(ctx, "mail", broker.Retention{MaxDone: 10}, 100); err != nil {
		t.Fatal(err)
	}
	if out := c.ok("", "inspect", "mail"); !strings.Contains(out, "10 done,") || !strings.Contains(out, "50 done in the last minute") {
		t.Fatalf("inspect mail, 50 jobs done and 10 kept:\n%s", out)
	}
}
