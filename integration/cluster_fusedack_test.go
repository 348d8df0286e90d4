package integration

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// one FusedAck whose acks are of queues on
// two masters and whose claim is of a queue on the third (one pipeline
// split by node), its re-sends (whole, with other acks, and the claim
// alone), then a pool of three queues, one per master, working through a
// backlog with fused claims while the scripts are flushed on every master.
func TestClusterFusedAck(t *testing.T) {
	tc := startCluster(t)
	ctx := context.Background()
	_, slotMaster := tc.masters(t)
	var queues []string
	seen := map[string]bool{}
	for i := 0; len(queues) < 3 && i < 1000; i++ {
		q := fmt.Sprintf("rq%d", i)
		slot, err := tc.client.ClusterKeySlot(ctx, "{"+q+"}").Result()
		if err != nil {
			t.Fatal(err)
		}
		if m := slotMaster(int(slot)); !seen[m] {
			seen[m] = true
			queues = append(queues, q)
		}
	}
	if len(queues) != 3 {
		t.Fatalf("queues %v", queues)
	}
	b, err := broker.New(tc.client, broker.Options{Prefix: "fqred"})
	if err != nil {
		t.Fatal(err)
	}
	enq := func(q string, n int) []string {
		var ids []string
		for range n {
			id, err := b.Client().Enqueue(ctx, broker.Job{Queue: q, Kind: "k", MaxAttempts: 1})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		return ids
	}
	// Direct: acks of queues[0] and queues[1], claim of queues[2].
	enq(queues[0], 2)
	enq(queues[1], 2)
	enq(queues[2], 3)
	var acks []broker.Ack
	for _, q := range queues[:2] {
		r, err := b.Leases().Claim(ctx, q, 2, time.Minute)
		if err != nil || len(r.Leases) != 2 {
			t.Fatalf("claim %s: %v %v", q, r, err)
		}
		for _, l := range r.Leases {
			acks = append(acks, broker.Ack{Lease: l, Result: []byte("r")})
		}
	}
	// The same lease twice, interleaved across the queues.
	acks = append(acks, acks[0])
	spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: queues[2], N: 2, Lease: time.Minute}
	fa, err := b.Leases().FusedAck(ctx, acks, spec)
	os, res := fa.Outcomes, fa.Claim
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range os {
		if o != broker.OK {
			t.Fatalf("ack %d (%s): %v", i, acks[i].Lease.Queue, o)
		}
	}
	if len(res.Leases) != 2 || res.Leases[0].Queue != queues[2] {
		t.Fatalf("claimed %+v", res.Leases)
	}
	fa, err = b.Leases().FusedAck(ctx, acks[:1], spec)
	os2, res2 := fa.Outcomes, fa.Claim
	if err != nil || os2[0] != broker.OK || len(res2.Leases) != 2 || res2.Leases[1].ClaimID() != res.Leases[1].ClaimID() {
		t.Fatalf("re-sent with fewer acks: %v %+v %v", os2, res2.Leases, err)
	}
	res3, err := b.Leases().ClaimRequest(ctx, spec.RequestID, spec.Queue, spec.N, spec.Lease)
	if err != nil || len(res3.Leases) != 2 || res3.Leases[0].ClaimID() != res.Leases[0].ClaimID() {
		t.Fatalf("claim alone: %+v %v", res3.Leases, err)
	}
	for _, q := range queues {
		bad, err := b.Inspector().Check(ctx, q)
		if err != nil || len(bad) > 0 {
			t.Fatalf("check %s: %v %v", q, bad, err)
		}
	}
	c2, _ := b.Inspector().Counts(ctx, queues[2])
	if c2.Running != 2 || c2.Pending != 1 {
		t.Fatalf("%s: %+v", queues[2], c2)
	}
	// Settle what the direct part holds, so the pool starts clean.
	if _, err := b.Leases().AckMany(ctx, []broker.Ack{{Lease: res.Leases[0]}, {Lease: res.Leases[1]}}); err != nil {
		t.Fatal(err)
	}

	// The pool.
	const per = 150
	total := int64(3*per) + 1 // and the one left pending above
	for _, q := range queues {
		enq(q, per)
	}
	var mu sync.Mutex
	ran := map[string]int{}
	var doneN, running, most atomic.Int64
	p, err := worker.New(b, handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		now := running.Add(1)
		for m := most.Load(); now > m && !most.CompareAndSwap(m, now); m = most.Load() {
		}
		mu.Lock()
		ran[j.Queue+"/"+j.ID]++
		mu.Unlock()
		time.Sleep(500 * time.Microsecond)
		running.Add(-1)
		doneN.Add(1)
		return nil
	}), worker.Config{Queues: []worker.Queue{{Name: queues[0]}, {Name: queues[1]}, {Name: queues[2]}},
		Concurrency: 6, LeaseDuration: 10 * time.Second, PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	flushed := false
	poll(t, 60*time.Second, "the pool to do every job", func() (bool, string) {
		if !flushed && doneN.Load() > total/3 {
			flushed = true
			if err := tc.client.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
				return c.ScriptFlush(ctx).Err()
			}); err != nil {
				t.Errorf("SCRIPT FLUSH: %v", err)
			}
		}
		return doneN.Load() >= total, fmt.Sprint(doneN.Load())
	})
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	if most.Load() > 6 {
		t.Errorf("%d handlers at once", most.Load())
	}
	for k, n := range ran {
		if n != 1 {
			t.Errorf("%s ran %d times", k, n)
		}
	}
	for _, q := range queues {
		c, err := b.Inspector().Counts(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		if c.Running != 0 || c.Pending != 0 || c.Dead != 0 {
			t.Errorf("%s after the pool: %+v", q, c)
		}
		bad, err := b.Inspector().Check(ctx, q)
		if err != nil || len(bad) > 0 {
			t.Errorf("check %s: %v %v", q, bad, err)
		}
	}
}
