package broker_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// the largest batch the acker sends, 256 acks (each twice, in
// one call) with a claim of 256, on miniredis and (FENCEQ_SCRATCH_REDIS, a
// scratch server) real Redis; then the claim alone again, and the whole
// call again with no acks.
func TestFusedAck256(t *testing.T) {
	clients := map[string]redis.UniversalClient{}
	mr := miniredis.RunT(t)
	clients["miniredis"] = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	if addr := os.Getenv("FENCEQ_SCRATCH_REDIS"); addr != "" {
		clients["redis"] = redis.NewClient(&redis.Options{Addr: addr})
	}
	for name, c := range clients {
		t.Run(name, func(t *testing.T) {
			defer c.Close()
			ctx := context.Background()
			b, err := broker.New(c, broker.Options{Prefix: "fqred" + broker.NewRequestID()[:8]})
			if err != nil {
				t.Fatal(err)
			}
			const n = 256
			jobs := make([]broker.Job, 2*n)
			for i := range jobs {
				jobs[i] = broker.Job{Queue: "q", Kind: "k", Payload: []byte("p"), MaxAttempts: 1}
			}
			for _, e := range b.Client().EnqueueMany(ctx, jobs) {
				if e.Err != nil {
					t.Fatal(e.Err)
				}
			}
			first, err := b.Leases().Claim(ctx, "q", n, time.Minute)
			if err != nil || len(first.Leases) != n {
				t.Fatalf("claim: %d %v", len(first.Leases), err)
			}
			var acks []broker.Ack
			for _, l := range first.Leases {
				acks = append(acks, broker.Ack{Lease: l, Result: []byte("r")}, broker.Ack{Lease: l, Result: []byte("other")})
			}
			spec := broker.ClaimSpec{RequestID: broker.NewRequestID(), Queue: "q", N: n, Lease: time.Minute}
			fa, err := b.Leases().FusedAck(ctx, acks, spec)
			os, res := fa.Outcomes, fa.Claim
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range os {
				if o != broker.OK {
					t.Fatalf("ack %d: %v", i, o)
				}
			}
			if len(res.Leases) != n {
				t.Fatalf("claimed %d", len(res.Leases))
			}
			again, err := b.Leases().ClaimRequest(ctx, spec.RequestID, "q", n, time.Minute)
			if err != nil || len(again.Leases) != n || again.Leases[n-1].ClaimID() != res.Leases[n-1].ClaimID() {
				t.Fatalf("claim alone again: %d %v", len(again.Leases), err)
			}
			fa, err = b.Leases().FusedAck(ctx, nil, spec)
			whole := fa.Claim
			if err != nil || len(whole.Leases) != n {
				t.Fatalf("whole again: %d %v", len(whole.Leases), err)
			}
			cs, _ := b.Inspector().Counts(ctx, "q")
			if cs.Done != n || cs.Running != int64(n) || cs.Pending != 0 {
				t.Fatalf("counts %+v", cs)
			}
			j, _ := b.Inspector().Job(ctx, "q", first.Leases[0].ID)
			if string(j.Result) != "r" {
				t.Fatalf("result %q: the duplicate ack overwrote it", j.Result)
			}
			bad, err := b.Inspector().Check(ctx, "q")
			if err != nil || len(bad) > 0 {
				t.Fatalf("check: %v %v", bad, err)
			}
		})
	}
}

// TestBatchPastUnpack claims and acks so many jobs in one script call
// that filing them in leases, or in done, in one ZADD would pass Lua's
// unpack more than it takes at once (about 8,000 values on Redis): the
// index writes that file a batch go in chunks (of 500 ids). On real Redis
// when FENCEQ_SCRATCH_REDIS names a scratch server, and on miniredis with
// 2,000 jobs, several chunks: its Lua overflows its registry in the claim
// record's concat well before Redis's unpack limit.
func TestBatchPastUnpack(t *testing.T) {
	clients := map[string]redis.UniversalClient{}
	sizes := map[string]int{"miniredis": 2000, "redis": 4500}
	mr := miniredis.RunT(t)
	clients["miniredis"] = redis.NewClient(&redis.Options{Addr: mr.Addr()})
	if addr := os.Getenv("FENCEQ_SCRATCH_REDIS"); addr != "" {
		clients["redis"] = redis.NewClient(&redis.Options{Addr: addr})
	}
	for name, c := range clients {
		for _, grouped := range []bool{false, true} {
			batchPastUnpack(t, name, c, sizes[name], grouped)
		}
		c.Close()
	}
}

// batchPastUnpack is one run of TestBatchPastUnpack; grouped puts every
// job in a group of its own (at most one running each), so the groups'
// reads and writes are that large too.
func batchPastUnpack(t *testing.T, name string, c redis.UniversalClient, n int, grouped bool) {
	if grouped {
		name += "/grouped"
	}
	{
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := "fqbig" + broker.NewRequestID()[:8]
			b, err := broker.New(c, broker.Options{Prefix: prefix})
			if err != nil {
				t.Fatal(err)
			}
			defer func() {
				// Thousands of jobs left on a shared server would slow
				// every later SCAN of it (Check's).
				it := c.Scan(ctx, 0, prefix+":*", 1000).Iterator()
				for it.Next(ctx) {
					c.Del(ctx, it.Val())
				}
			}()
			jobs := make([]broker.Job, n)
			for i := range jobs {
				jobs[i] = broker.Job{Queue: "q", Kind: "k", Payload: []byte("p"), MaxAttempts: 1}
				if grouped {
					jobs[i].Group = fmt.Sprint("g", i)
				}
			}
			if grouped {
				if err := c.HSet(ctx, prefix+":{q}:limits", "g_max_running", 1).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, e := range b.Client().EnqueueMany(ctx, jobs) {
				if e.Err != nil {
					t.Fatal(e.Err)
				}
			}
			res, err := b.Leases().Claim(ctx, "q", n, time.Minute)
			if err != nil || len(res.Leases) != n {
				t.Fatalf("claim: %d %v", len(res.Leases), err)
			}
			if cs, _ := b.Inspector().Counts(ctx, "q"); cs.Running != int64(n) || cs.Pending != 0 {
				t.Fatalf("after the claim: counts %+v", cs)
			}
			acks := make([]broker.Ack, n)
			for i, l := range res.Leases {
				acks[i] = broker.Ack{Lease: l}
			}
			os, err := b.Leases().AckMany(ctx, acks)
			if err != nil {
				t.Fatal(err)
			}
			for i, o := range os {
				if o != broker.OK {
					t.Fatalf("ack %d: %v", i, o)
				}
			}
			if cs, _ := b.Inspector().Counts(ctx, "q"); cs.Done != int64(n) || cs.Running != 0 {
				t.Fatalf("after the acks: counts %+v", cs)
			}
			bad, err := b.Inspector().Check(ctx, "q")
			if err != nil || len(bad) > 0 {
				t.Fatalf("check: %v %v", bad, err)
			}
		})
	}
}
