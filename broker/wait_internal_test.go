package broker

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Redis reads a blocking timeout of 0 as "block forever": a short slice
// must round up, never down to "0.000".
func TestBlockSeconds(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0.001"}, {-time.Second, "0.001"}, {300 * time.Microsecond, "0.001"},
		{time.Millisecond, "0.001"}, {1500 * time.Microsecond, "0.002"}, {1500 * time.Millisecond, "1.500"},
	} {
		if got := blockSeconds(tc.d); got != tc.want {
			t.Errorf("blockSeconds(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
}

// A caller of Wait names the job it registered on by its created_at: a
// slow caller, woken after the job was trimmed and its id enqueued again,
// gets the job it waited for (kept as final:<id>), not the new one, and
// ErrJobNotFound once the keep has expired, never the new job's end.
func TestWaitAcrossIDReuse(t *testing.T) {
	mr := miniredis.RunT(t)
	now := time.Now()
	mr.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := New(rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const q, id = "q", "reused"
	k := b.queueKeys(q)
	// wait answers the script's status and the strings that follow it.
	wait := func(woken, mine string) (status, []string) {
		t.Helper()
		v, err := b.run(ctx, b.scripts.wait, k, id, woken, mine).Result()
		r := newReply("wait", v, err)
		s := r.status()
		var rest []string
		for r.more() {
			rest = append(rest, r.str())
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		return s, rest
	}
	if _, err := b.Enqueue(ctx, Job{Queue: q, Kind: "k", ID: id}); err != nil {
		t.Fatal(err)
	}
	s, v := wait("0", "")
	if len(v) != 1 || s != statusWaiting {
		t.Fatalf("first look = %v %q, want waiting and the job's created_at", s, v)
	}
	mine := v[0]
	c, err := b.Claim(ctx, q, 1, time.Minute)
	if err != nil || len(c.Leases) != 1 {
		t.Fatalf("claim: %v %+v", err, c)
	}
	if _, err := b.Ack(ctx, c.Leases[0], []byte("old")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Second)
	mr.SetTime(now)
	if n, err := b.Trim(ctx, q, Retention{Done: time.Millisecond}, 10); err != nil || n != 1 {
		t.Fatalf("Trim = %d, %v; want the job trimmed", n, err)
	}
	now = now.Add(time.Second) // the new job's created_at differs
	mr.SetTime(now)
	if _, err := b.Enqueue(ctx, Job{Queue: q, Kind: "k", ID: id}); err != nil {
		t.Fatalf("Enqueue under the trimmed id: %v", err)
	}

	s, v = wait("1", mine)
	h := map[string]string{}
	for i := 0; i+1 < len(v); i += 2 {
		h[v[i]] = v[i+1]
	}
	if s != statusOK || h["state"] != "done" || h["result"] != "old" {
		t.Fatalf("the slow caller's look = %v %q, want the old job, done with result old", s, v)
	}
	if s, v := wait("0", ""); s != statusWaiting {
		t.Fatalf("a new caller's look = %v %q, want it to wait for the new job", s, v)
	}

	// The keep expires a minute after the job finished.
	mr.FastForward(61 * time.Second)
	if s, v := wait("1", mine); s != statusMissing {
		t.Fatalf("the slow caller's look a minute later = %v %q, want missing", s, v)
	}
}
