package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// ValidateGroup takes "" (no group) and plain names, and refuses what
// Enqueue refuses, naming the field.
func TestValidateGroup(t *testing.T) {
	for _, good := range []string{"", "acme", "tenant 42", "ключ", strings.Repeat("g", MaxGroupBytes)} {
		if err := ValidateGroup(good); err != nil {
			t.Errorf("ValidateGroup(%q) = %v, want nil", good, err)
		}
	}
	b, _ := miniBroker(t)
	for _, bad := range []string{strings.Repeat("g", MaxGroupBytes+1), "\xff", "a\x01b", "a\tb", "a\u0085b",
		" acme", "acme ", "acme\n", "\u00a0acme", "acme\u3000"} {
		var ve *ValidationError
		if err := ValidateGroup(bad); !errors.As(err, &ve) || ve.Field != "group" || ve.Reason == "" {
			t.Errorf("ValidateGroup(%q) = %v; want a *ValidationError for group", bad, err)
		}
		_, err := b.Client().Enqueue(context.Background(), Job{Queue: "q", Kind: "k", Group: bad})
		if !errors.As(err, &ve) || ve.Field != "group" {
			t.Errorf("Enqueue with group %q: %v; want a *ValidationError for group", bad, err)
		}
	}
}

// A job with a group stores it in its hash, and every claim of it, the
// retry's included, hands it back; Inspector.Job shows it. A job without
// one stores no group field at all.
func TestGroupStoredAndHandedBack(t *testing.T) {
	b, rdb := miniBroker(t)
	ctx := context.Background()
	with, err := b.Client().Enqueue(ctx, Job{Queue: "q", Kind: "k", Group: "acme", Priority: 1})
	if err != nil {
		t.Fatal(err)
	}
	without, err := b.Client().Enqueue(ctx, Job{Queue: "q", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	k := b.queueKeys("q")
	if g, err := rdb.HGet(ctx, k.derived(kindJob, with), fieldGroup).Result(); err != nil || g != "acme" {
		t.Fatalf("the grouped job's group field is %q, %v; want acme", g, err)
	}
	if ok, err := rdb.HExists(ctx, k.derived(kindJob, without), fieldGroup).Result(); err != nil || ok {
		t.Fatalf("the job without a group has a group field (%v, %v)", ok, err)
	}
	for id, want := range map[string]string{with: "acme", without: ""} {
		info, err := b.Inspector().Job(ctx, "q", id)
		if err != nil || info.Group != want {
			t.Fatalf("Inspector.Job(%s).Group = %q, %v; want %q", id, info.Group, err, want)
		}
	}
	res, err := b.Leases().Claim(ctx, "q", 2, time.Minute)
	if err != nil || len(res.Leases) != 2 {
		t.Fatalf("claim: %+v, %v", res, err)
	}
	for _, l := range res.Leases {
		want := map[string]string{with: "acme", without: ""}[l.ID]
		if l.Group != want {
			t.Fatalf("lease of %s has group %q, want %q", l.ID, l.Group, want)
		}
		if _, err := b.Leases().Fail(ctx, l, Failure{Error: "again"}); err != nil {
			t.Fatal(err)
		}
	}
	res, err = b.Leases().Claim(ctx, "q", 2, time.Minute)
	if err != nil || len(res.Leases) != 2 {
		t.Fatalf("claim of the retries: %+v, %v", res, err)
	}
	for _, l := range res.Leases {
		if want := map[string]string{with: "acme", without: ""}[l.ID]; l.Group != want || l.Attempt != 2 {
			t.Fatalf("retry of %s: attempt %d, group %q; want 2 and %q", l.ID, l.Attempt, l.Group, want)
		}
	}
}
