package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// inspect job shows each failed attempt's error and, while the job runs,
// how many times its lease was renewed; --json gives both.
func TestInspectJobShowsErrorsAndRenewals(t *testing.T) {
	c := newCLI(t)
	rdb := redis.NewClient(&redis.Options{Addr: c.mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	id := strings.TrimSpace(c.ok("", "enqueue", "mail", "welcome", "--max-attempts", "3"))
	claim := func() broker.Lease {
		t.Helper()
		res, err := b.Leases().Claim(ctx, "mail", 1, time.Minute)
		if err != nil || len(res.Leases) != 1 {
			t.Fatalf("claim: %+v, %v", res, err)
		}
		return res.Leases[0]
	}
	if _, err := b.Leases().Fail(ctx, claim(), broker.Failure{Error: "smtp: connection refused"}); err != nil {
		t.Fatal(err)
	}
	l := claim()
	for range 2 {
		if _, err := b.Leases().Renew(ctx, []broker.Lease{l}, time.Minute); err != nil {
			t.Fatal(err)
		}
	}

	j := c.job("mail", id)
	if j.Renewals != 2 || len(j.Errors) != 1 || j.Errors[0].Attempt != 1 || j.Errors[0].Error != "smtp: connection refused" || j.Errors[0].At.IsZero() {
		t.Fatalf("inspect job --json: renewals %d, errors %+v; want 2 renewals and attempt 1's error", j.Renewals, j.Errors)
	}
	out := c.ok("", "inspect", "job", "mail", id)
	for _, want := range []string{"renewals", "2", "error, attempt 1", "smtp: connection refused"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect job prints no %q:\n%s", want, out)
		}
	}
}
