package broker

import (
	"context"
	"slices"
	"strconv"
	"strings"
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

// A caller of Wait names the job it registered on by its wait_tag: a
// slow caller, woken after the job was trimmed and its id enqueued again,
// gets the job it waited for (kept as a final record), not the new one, and
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
	if _, err := b.Client().Enqueue(ctx, Job{Queue: q, Kind: "k", ID: id}); err != nil {
		t.Fatal(err)
	}
	s, v := wait("0", "")
	if len(v) != 1 || s != statusWaiting {
		t.Fatalf("first look = %v %q, want waiting and the job's wait_tag", s, v)
	}
	mine := v[0]
	c, err := b.Leases().Claim(ctx, q, 1, time.Minute)
	if err != nil || len(c.Leases) != 1 {
		t.Fatalf("claim: %v %+v", err, c)
	}
	if _, err := b.Leases().Ack(ctx, c.Leases[0], []byte("old")); err != nil {
		t.Fatal(err)
	}
	now = now.Add(ResendHorizon + time.Second) // past the horizon: retention may delete it
	mr.SetTime(now)
	if n, err := b.Leases().Trim(ctx, q, Retention{Done: time.Millisecond}, 10); err != nil || n != 1 {
		t.Fatalf("Trim = %d, %v; want the job trimmed", n, err)
	}
	if _, err := b.Client().Enqueue(ctx, Job{Queue: q, Kind: "k", ID: id}); err != nil {
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

// Each job under an id that was waited on and trimmed keeps its own final
// record for its callers, at most waitKeepRecords of them: enqueuing,
// waiting on, finishing and trimming one id in a loop keeps that many keys,
// the oldest record giving way to the newest (its slow caller then gets
// ErrJobNotFound), never one more.
func TestWaitKeepsBoundedRecords(t *testing.T) {
	const waitKeepRecords = 4 // lib.lua's WAIT_KEEP_RECORDS
	mr := miniredis.RunT(t)
	now := time.Now()
	mr.SetTime(now)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := New(rdb, Options{Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const q, id = "q", "loop"
	k := b.queueKeys(q)
	wait := func(mine string) (status, map[string]string, string) {
		t.Helper()
		v, err := b.run(ctx, b.scripts.wait, k, id, "0", mine).Result()
		r := newReply("wait", v, err)
		s := r.status()
		var rest []string
		for r.more() {
			rest = append(rest, r.str())
		}
		if r.err != nil {
			t.Fatal(r.err)
		}
		h := map[string]string{}
		for i := 0; i+1 < len(rest); i += 2 {
			h[rest[i]] = rest[i+1]
		}
		if s == statusWaiting {
			return s, nil, rest[0]
		}
		return s, h, ""
	}
	var tags []string
	for i := range waitKeepRecords + 2 {
		if _, err := b.Client().Enqueue(ctx, Job{Queue: q, Kind: "k", ID: id}); err != nil {
			t.Fatalf("Enqueue %d: %v", i, err)
		}
		s, _, tag := wait("")
		if s != statusWaiting || slices.Contains(tags, tag) {
			t.Fatalf("look %d = %v with tag %q, want waiting with a tag none of %q has", i, s, tag, tags)
		}
		tags = append(tags, tag)
		c, err := b.Leases().Claim(ctx, q, 1, time.Minute)
		if err != nil || len(c.Leases) != 1 {
			t.Fatalf("claim %d: %v %+v", i, err, c)
		}
		if _, err := b.Leases().Ack(ctx, c.Leases[0], []byte(strconv.Itoa(i))); err != nil {
			t.Fatal(err)
		}
		now = now.Add(ResendHorizon + time.Second) // past the horizon: retention may delete it
		mr.SetTime(now)
		if n, err := b.Leases().Trim(ctx, q, Retention{Done: time.Millisecond}, 10); err != nil || n != 1 {
			t.Fatalf("Trim %d = %d, %v; want the job trimmed", i, n, err)
		}
	}
	finals := 0
	for _, key := range mr.Keys() {
		if strings.HasPrefix(key, k.derived(kindFinal, "")) {
			finals++
		}
	}
	if finals != waitKeepRecords {
		t.Fatalf("%d final records after %d jobs under one id were waited on and trimmed; want %d", finals, len(tags), waitKeepRecords)
	}
	for i, tag := range tags {
		s, h, _ := wait(tag)
		if i < len(tags)-waitKeepRecords {
			if s != statusMissing {
				t.Fatalf("caller of job %d, whose record gave way to %d later ones: %v %v, want missing", i, waitKeepRecords, s, h)
			}
			continue
		}
		if s != statusOK || h["result"] != strconv.Itoa(i) {
			t.Fatalf("caller of job %d: %v %v, want done with result %d", i, s, h, i)
		}
	}
	if s, h, _ := wait(""); s != statusOK || h["result"] != strconv.Itoa(len(tags)-1) {
		t.Fatalf("a new caller: %v %v, want the newest job's end", s, h)
	}
}
