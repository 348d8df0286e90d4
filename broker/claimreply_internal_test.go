package broker

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/scripts/lua"
)

// claimReplyChecks gives, for each name of claimReplyFields, a Lua value
// for take.lua's claim_reply (each different from the others, so that two
// swapped positions show) and the Lease field readClaim must read it into.
var claimReplyChecks = map[string]struct {
	lua  string
	got  func(Lease) any
	want any
}{
	"id":             {`'the-id'`, func(l Lease) any { return l.ID }, "the-id"},
	fieldKind:        {`'the-kind'`, func(l Lease) any { return l.Kind }, "the-kind"},
	fieldPayload:     {`'the-payload'`, func(l Lease) any { return string(l.Payload) }, "the-payload"},
	fieldAttempt:     {`2`, func(l Lease) any { return l.Attempt }, 2},
	fieldMaxAttempts: {`3`, func(l Lease) any { return l.MaxAttempts }, 3},
	fieldGen:         {`5`, func(l Lease) any { return l.Generation }, int64(5)},
	fieldToken:       {`'the-token'`, func(l Lease) any { return l.token }, "the-token"},
	fieldLeaseUntil:  {`7000`, func(l Lease) any { return l.Deadline }, time.UnixMilli(7000)},
	fieldMeta:        {`'{"m":"v"}'`, func(l Lease) any { return l.Metadata }, map[string]string{"m": "v"}},
	fieldGroup:       {`'the-group'`, func(l Lease) any { return l.Group }, "the-group"},
}

// take.lua's claim_reply answers a claimed job's values where readClaim
// reads them: both go by claimReplyFields. It runs the preamble, lib.lua
// and take.lua as a claim does, on miniredis's Lua.
func TestClaimReplyOrderMatchesGo(t *testing.T) {
	for i, name := range claimReplyFields {
		if name == "" {
			t.Fatalf("claimReplyFields has no name at position %d", i)
		}
		if slices.Index(claimReplyFields[:], name) != i {
			t.Fatalf("claimReplyFields names %q twice", name)
		}
		if _, ok := claimReplyChecks[name]; !ok {
			t.Fatalf("claimReplyChecks has no check for %q", name)
		}
	}
	if len(claimReplyChecks) != len(claimReplyFields) {
		t.Fatalf("claimReplyChecks checks %d names, claimReplyFields has %d", len(claimReplyChecks), len(claimReplyFields))
	}
	var job strings.Builder
	for name, c := range claimReplyChecks {
		fmt.Fprintf(&job, "[%q] = %s, ", name, c.lua)
	}
	const now = 1000
	src := claimPreamble(t) + fmt.Sprintf(`
local out = {%d, -1, 2}
claim_reply(out, {%s})
claim_reply(out, {%s})
return out`, now, job.String(), job.String())

	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	v, err := redis.NewScript(src).Run(context.Background(), rdb, nil).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(v.([]any)); n != 3+2*claimReplyWidth {
		t.Fatalf("claim_reply answered %d values for 2 jobs; want %d", n-3, 2*claimReplyWidth)
	}
	res, err := readClaim(newQueueReply("claim", "q", v, nil), "q", time.Minute, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Leases) != 2 || len(res.Problems) != 0 {
		t.Fatalf("readClaim read %d leases and problems %v; want 2 and none", len(res.Leases), res.Problems)
	}
	for _, l := range res.Leases {
		if l.Queue != "q" {
			t.Errorf("Queue = %q, want q", l.Queue)
		}
		for name, c := range claimReplyChecks {
			if got := c.got(l); !reflect.DeepEqual(got, c.want) {
				t.Errorf("the value claim_reply answers as %q reads as %v, want %v", name, got, c.want)
			}
		}
	}

	// A job table that lacks a value is an error, not a reply shifted by one.
	src = claimPreamble(t) + `
local out = {}
claim_reply(out, {id = 'x'})
return out`
	if err := redis.NewScript(src).Run(context.Background(), rdb, nil).Err(); err == nil || !strings.Contains(err.Error(), "claim reply has no") {
		t.Fatalf("claim_reply of a job without its fields: %v, want an error naming the one missing", err)
	}
}

// claimPreamble is the Lua a claim runs before claim.lua: the preamble,
// lib.lua and take.lua.
func claimPreamble(t *testing.T) string {
	t.Helper()
	src := scriptKeys() + scriptFields()
	for _, name := range []string{"lib.lua", "take.lua"} {
		b, err := lua.FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		src += "\n" + string(b)
	}
	return src
}

// A claim and its re-send answer the same leases, read from the values
// both of take.lua's paths (the claim loop, answer for a re-sent request)
// hand to claim_reply.
func TestClaimReplyBothPaths(t *testing.T) {
	b, _ := miniBroker(t)
	ctx := context.Background()
	id, err := b.Client().Enqueue(ctx, Job{Queue: "q", Kind: "k", Payload: []byte(`"p"`), MaxAttempts: 4,
		Metadata: map[string]string{"m": "v"}, Group: "acme"})
	if err != nil {
		t.Fatal(err)
	}
	req := NewRequestID()
	first, err := b.Leases().ClaimRequest(ctx, req, "q", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	again, err := b.Leases().ClaimRequest(ctx, req, "q", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(first.Leases) != 1 || len(again.Leases) != 1 {
		t.Fatalf("claimed %d, then %d on the re-send; want 1 and 1", len(first.Leases), len(again.Leases))
	}
	l := first.Leases[0]
	if l.ID != id || l.Kind != "k" || string(l.Payload) != `"p"` || l.Attempt != 1 || l.MaxAttempts != 4 ||
		l.Generation < 1 || l.token == "" || l.Deadline.IsZero() || !reflect.DeepEqual(l.Metadata, map[string]string{"m": "v"}) ||
		l.Group != "acme" {
		t.Fatalf("the claim's lease is %+v", l)
	}
	a := again.Leases[0]
	a.LocalDeadline = l.LocalDeadline // the re-send was sent later
	if !reflect.DeepEqual(a, l) {
		t.Fatalf("the re-sent claim answered\n%+v\nthe claim\n%+v", a, l)
	}
}

// A re-sent claim over a lease whose numbers a hand edit broke since it
// was taken answers without that lease, instead of failing the whole
// re-send; the job is left to its lease's end and the reaper.
func TestClaimResendSkipsLeaseBrokenSince(t *testing.T) {
	b, rdb := miniBroker(t)
	ctx := context.Background()
	for _, field := range []string{fieldAttempt, fieldMaxAttempts, fieldGen, fieldLeaseUntil} {
		t.Run(field, func(t *testing.T) {
			queue := "q-" + field
			broken, err := b.Client().Enqueue(ctx, Job{Queue: queue, Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			kept, err := b.Client().Enqueue(ctx, Job{Queue: queue, Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			req := NewRequestID()
			first, err := b.Leases().ClaimRequest(ctx, req, queue, 2, time.Minute)
			if err != nil || len(first.Leases) != 2 {
				t.Fatalf("claim: %d leases, %v; want 2", len(first.Leases), err)
			}
			key := b.queueKeys(queue).derived(kindJob, broken)
			if err := rdb.HSet(ctx, key, field, "not a number").Err(); err != nil {
				t.Fatal(err)
			}
			again, err := b.Leases().ClaimRequest(ctx, req, queue, 2, time.Minute)
			if err != nil {
				t.Fatalf("the re-send failed: %v", err)
			}
			if len(again.Leases) != 1 || again.Leases[0].ID != kept {
				t.Fatalf("the re-send answered %+v; want only %s", again.Leases, kept)
			}
		})
	}
}
