// Package brokertest is the broker conformance suite: one set of test bodies
// that runs against every Redis backend fenceq supports (miniredis in the
// broker package's unit tests, a real Redis server in integration/). A
// behaviour that passes on one and fails on the other is a bug in the
// scripts' portability, so the bodies never branch on the backend except
// through Backend.Advance.
package brokertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// Backend is one Redis to run the suite on.
type Backend struct {
	// Client reaches the server. The suite isolates each test by key prefix
	// and deletes its keys afterwards, so a shared server is fine.
	Client redis.UniversalClient
	// Advance moves the server's clock forward by at least d: miniredis's
	// SetTime, or a sleep on a real server.
	Advance func(d time.Duration)
	// Frozen says that the server's clock moves only with Advance
	// (miniredis's SetTime and FastForward): a script's time and a key's
	// expiry are then exact, and the model test holds every time boundary
	// to the millisecond. On a real server it allows a few either side.
	Frozen bool
}

// NewBackend returns a Backend for one test; it may call t.Skip.
type NewBackend func(t testing.TB) Backend

type bundle struct {
	Backend
	b   *broker.Broker
	ctx context.Context
	q   string
}

// setup gives a test its own broker under a fresh prefix, and removes the
// prefix's keys when the test ends.
func setup(t testing.TB, nb NewBackend, opts ...func(*broker.Options)) *bundle {
	t.Helper()
	s, cleanup := on(t, nb(t), opts...)
	t.Cleanup(cleanup)
	return s
}

// on is setup on a given backend; the caller runs cleanup.
func on(t failer, be Backend, opts ...func(*broker.Options)) (*bundle, func()) {
	t.Helper()
	o := broker.Options{Prefix: "fqtest-" + randHex()}
	for _, f := range opts {
		f(&o)
	}
	b, err := broker.New(be.Client, o)
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	return &bundle{Backend: be, b: b, ctx: context.Background(), q: "q"}, func() { deletePrefix(be.Client, o.Prefix) }
}

// deletePrefix removes the prefix's keys. On a Cluster, SCAN sees one node
// only, so every master is scanned; keys go one DEL each, since a DEL of
// keys in several slots is refused (CROSSSLOT).
func deletePrefix(c redis.UniversalClient, prefix string) {
	ctx := context.Background()
	del := func(ctx context.Context, node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, prefix+":*", 1000).Iterator()
		var keys []string
		for iter.Next(ctx) {
			keys = append(keys, iter.Val())
		}
		for _, k := range keys {
			node.Del(ctx, k)
		}
		return iter.Err()
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
		return
	}
	_ = del(ctx, c)
}

func randHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
