package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// A session is active from its start until it ends or expires, for every
// broker over the same Redis, and it is one key under the prefix.
func TestSessions(t *testing.T) {
	mr := miniredis.RunT(t)
	ctx := context.Background()
	var bs []*broker.Broker
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		b, err := broker.New(c, broker.Options{Prefix: "p"})
		if err != nil {
			t.Fatal(err)
		}
		bs = append(bs, b)
	}
	active := func(b *broker.Broker, id string) bool {
		t.Helper()
		ok, err := b.Inspector().SessionActive(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if active(bs[0], "s1") {
		t.Fatal("a session never started is active")
	}
	if err := bs[0].Inspector().StartSession(ctx, "s1", time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := bs[0].Inspector().StartSession(ctx, "s2", time.Minute); err != nil {
		t.Fatal(err)
	}
	if !active(bs[1], "s1") || !active(bs[1], "s2") {
		t.Fatal("a started session is not active on another broker")
	}
	if got := mr.Keys(); strings.Join(got, " ") != "p:session:s1 p:session:s2" {
		t.Errorf("sessions are kept as %q", got)
	}
	if err := bs[1].Inspector().EndSession(ctx, "s1"); err != nil {
		t.Fatal(err)
	}
	if err := bs[1].Inspector().EndSession(ctx, "s1"); err != nil {
		t.Fatalf("ending an ended session: %v", err)
	}
	if active(bs[0], "s1") || !active(bs[0], "s2") {
		t.Error("ending one session did not end just that one")
	}
	mr.FastForward(time.Minute)
	if active(bs[0], "s2") {
		t.Error("a session outlived its life")
	}
	var ve *broker.ValidationError
	for _, id := range []string{"", "a:b", strings.Repeat("a", 65)} {
		if _, err := bs[0].Inspector().SessionActive(ctx, id); !errors.As(err, &ve) {
			t.Errorf("session id %q: %v, want a *ValidationError", id, err)
		}
	}
	if err := bs[0].Inspector().StartSession(ctx, "s3", 0); !errors.As(err, &ve) {
		t.Errorf("a session of no life: %v, want a *ValidationError", err)
	}
}
