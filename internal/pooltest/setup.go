// Package pooltest is the worker pool's conformance suite: the same
// scenarios on every Redis backend (miniredis in the worker package's unit
// tests, a real Redis in integration/). Clocks are real: leases are short
// and the scenarios wait on signals from handlers, or poll Redis with a
// generous bound that only a broken pool can reach.
package pooltest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// NewClient returns a client for one test; it may call t.Skip.
type NewClient func(t testing.TB) redis.UniversalClient

type bundle struct {
	client redis.UniversalClient
	b      *broker.Broker
	ctx    context.Context
	q      string
	logs   *logSink
}

func setup(t *testing.T, nc NewClient) *bundle {
	t.Helper()
	c := nc(t)
	var rb [6]byte
	_, _ = rand.Read(rb[:])
	prefix := "fqpool-" + hex.EncodeToString(rb[:])
	b, err := broker.New(c, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatalf("broker.New: %v", err)
	}
	t.Cleanup(func() {
		// KEYS sees one node only: on a Cluster, ask every master, and
		// delete key by key, since one DEL must not span slots.
		ctx := context.Background()
		del := func(ctx context.Context, node redis.Cmdable) error {
			keys, err := node.Keys(ctx, prefix+":*").Result()
			for _, k := range keys {
				node.Del(ctx, k)
			}
			return err
		}
		if cc, ok := c.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
			return
		}
		_ = del(ctx, c)
	})
	return &bundle{client: c, b: b, ctx: context.Background(), q: "q", logs: &logSink{}}
}

// config is the tests' default: short leases, quick polls, quick retries.
func (s *bundle) config(mods ...func(*worker.Config)) worker.Config {
	cfg := worker.Config{
		Queues:          []worker.Queue{{Name: s.q}},
		Concurrency:     4,
		LeaseDuration:   time.Second,
		PollInterval:    50 * time.Millisecond,
		ShutdownTimeout: time.Second,
		Backoff:         func(int) time.Duration { return 10 * time.Millisecond },
		Logger:          slog.New(s.logs),
	}
	for _, m := range mods {
		m(&cfg)
	}
	return cfg
}

// pool starts a pool and shuts it down when the test ends, unless the test
// did. The pool's logs go to the bundle's sink.
func (s *bundle) pool(t *testing.T, h handlers.Handler, mods ...func(*worker.Config)) *testPool {
	t.Helper()
	p, err := worker.New(s.b, h, s.config(mods...))
	if err != nil {
		t.Fatalf("worker.New: %v", err)
	}
	if err := p.Start(s.ctx); err != nil {
		t.Fatalf("Start: %v", err)
	}
	tp := &testPool{Pool: p}
	t.Cleanup(func() { tp.shutdown(t) })
	return tp
}

type testPool struct {
	*worker.Pool
	once sync.Once
}

func (p *testPool) shutdown(t *testing.T) {
	p.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
}

func (s *bundle) enqueue(t *testing.T, j broker.Job) string {
	t.Helper()
	j.Queue = s.q
	if j.Kind == "" {
		j.Kind = "k"
	}
	id, err := s.b.Client().Enqueue(s.ctx, j)
	if err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	return id
}

// waitFinal polls the job until it is done, dead or cancelled. The bound is
// a failure detector, not a performance target.
func (s *bundle) waitFinal(t *testing.T, id string, within time.Duration) broker.JobInfo {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		j, err := s.b.Inspector().Job(s.ctx, s.q, id)
		if err != nil {
			t.Fatalf("Job: %v", err)
		}
		if j.State.Final() {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s after %v\nlogs:\n%s", id, j.State, within, s.logs)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (s *bundle) consistent(t *testing.T) {
	t.Helper()
	bad, err := s.b.Inspector().Check(s.ctx, s.q)
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	if len(bad) > 0 {
		t.Fatalf("invariant 6 violated: %v", bad)
	}
}

func want[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

// recv waits for a value on ch, failing the test after within.
func recv[T any](t *testing.T, what string, ch <-chan T, within time.Duration) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(within):
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
	var zero T
	return zero
}

// logSink is a slog.Handler that keeps every record, for assertions.
type logSink struct {
	mu    sync.Mutex
	lines []string
}

func (l *logSink) Enabled(context.Context, slog.Level) bool { return true }
func (l *logSink) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logSink) WithGroup(string) slog.Handler            { return l }
func (l *logSink) Handle(_ context.Context, r slog.Record) error {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s %s", r.Level, r.Message)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&sb, " %s", a)
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, sb.String())
	l.mu.Unlock()
	return nil
}

func (l *logSink) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, line := range l.lines {
		if strings.Contains(line, substr) {
			n++
		}
	}
	return n
}

func (l *logSink) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}
