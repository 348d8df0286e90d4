package worker_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/internal/version"
	"github.com/fenceq/fenceq/worker"
)

// logLines records the messages a pool logs.
type logLines struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func (l *logLines) count(substr string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, substr) {
			n++
		}
	}
	return n
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// A pool is in the registry from Start to Shutdown, says who it is, and
// lists the jobs it runs under their claim's generation.
func TestRegistryListsThePool(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	in := b.Inspector()
	release := make(chan struct{})
	h := handlers.HandlerFunc(func(context.Context, *handlers.Job) error { <-release; return nil })
	p, err := worker.New(b, h, worker.Config{Name: "pool 1", Queues: []worker.Queue{{Name: "mail"}, {Name: "sms"}},
		Concurrency: 3, PollInterval: 10 * time.Millisecond, RegistryInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// Listed at once: Start writes the entry.
	ws, err := in.Workers(ctx)
	if err != nil || len(ws.Workers) != 1 {
		t.Fatalf("after Start: %+v, %v", ws, err)
	}
	w := ws.Workers[0]
	host, _ := os.Hostname()
	if w.Name != "pool 1" || w.Host != host || w.PID != os.Getpid() || w.Version != version.String() ||
		!slices.Equal(w.Queues, []string{"mail", "sms"}) || w.Concurrency != 3 || w.Running != 0 {
		t.Errorf("listed %+v", w)
	}
	if w.ExpiresAt.Sub(w.SeenAt) != 60*time.Millisecond {
		t.Errorf("the entry lives %v past its refresh, want 3 intervals", w.ExpiresAt.Sub(w.SeenAt))
	}

	id, err := b.Client().Enqueue(ctx, broker.Job{Queue: "sms", Kind: "send"})
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the running job in the entry", func() bool {
		ws, err := in.Workers(ctx)
		return err == nil && len(ws.Workers) == 1 && ws.Workers[0].Running == 1 && len(ws.Workers[0].Jobs) == 1
	})
	j, err := in.Job(ctx, "sms", id)
	if err != nil {
		t.Fatal(err)
	}
	holder, rj, ok, err := in.JobHolder(ctx, "sms", id, j.Generation)
	if err != nil || !ok || holder.ID != w.ID {
		t.Fatalf("JobHolder = %v, %v, %v", holder.ID, ok, err)
	}
	if rj.Since.IsZero() || rj.Since.After(holder.SeenAt) {
		t.Errorf("running since %v, seen at %v", rj.Since, holder.SeenAt)
	}

	if w := holder; w.Stopping {
		t.Error("a running pool is listed as stopping")
	}
	// Shutdown marks the entry stopping at once, and keeps it while the
	// handler finishes.
	stopped := make(chan error, 1)
	go func() { stopped <- p.Shutdown(ctx) }()
	waitFor(t, "the entry marked stopping", func() bool {
		ws, err := in.Workers(ctx)
		return err == nil && len(ws.Workers) == 1 && ws.Workers[0].Stopping && ws.Workers[0].Running == 1
	})
	close(release)
	if err := <-stopped; err != nil {
		t.Fatal(err)
	}
	if ws, err := in.Workers(ctx); err != nil || len(ws.Workers) != 0 {
		t.Errorf("after Shutdown: %+v, %v", ws, err)
	}
	if keys := mr.Keys(); slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, "workers") }) {
		t.Errorf("after Shutdown the registry keeps %q", keys)
	}
}

// NoRegistry keeps a pool out; a bad interval or name is refused by New.
func TestRegistryConfig(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	h := handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil })
	for _, c := range []struct {
		cfg   worker.Config
		field string
	}{
		{worker.Config{RegistryInterval: 5 * time.Millisecond}, "RegistryInterval"},
		{worker.Config{RegistryInterval: -2}, "RegistryInterval"},
		{worker.Config{Name: "a\nb"}, "Name"},
		{worker.Config{Name: strings.Repeat("n", 201)}, "Name"},
	} {
		_, err := worker.New(b, h, c.cfg)
		var ce *worker.ConfigError
		if !errors.As(err, &ce) || ce.Field != c.field {
			t.Errorf("New(%+v) = %v, want a ConfigError of %s", c.cfg, err, c.field)
		}
	}
	p, err := worker.New(b, h, worker.Config{RegistryInterval: worker.NoRegistry, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(ctx) }()
	if ws, err := b.Inspector().Workers(ctx); err != nil || len(ws.Workers) != 0 {
		t.Errorf("a pool with NoRegistry is listed: %+v, %v", ws, err)
	}
}

// A Redis outage stops no refresh loop and is logged once, by the pool's
// one outage line, and once more when Redis is back (the registry writes
// no line of its own for it); the entry is written again then.
func TestRegistryOutageLogsOnce(t *testing.T) {
	o := newOutage(t)
	var logs logLines
	p, err := worker.New(o.b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error { return nil }), worker.Config{
		PollInterval: 20 * time.Millisecond, RegistryInterval: 20 * time.Millisecond, Logger: slog.New(&logs),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	err = p.Start(ctx)
	for try := 1; err != nil && isTimeout(err) && try < 5; try++ {
		err = p.Start(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	const warn, back = "Redis unavailable", "Redis answers again"
	const own = "could not refresh this pool's entry"
	o.mr.Close()
	time.Sleep(500 * time.Millisecond) // some 25 refreshes fail
	if n := logs.count(warn); n != 1 {
		t.Errorf("an outage of 25 refreshes logged %d warnings, want 1", n)
	}
	if err := o.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	o.mr.FlushAll() // the entry is gone, as after a failover to an empty replica
	waitFor(t, "the entry written again", func() bool {
		ws, err := o.b.Inspector().Workers(ctx)
		return err == nil && len(ws.Workers) == 1
	})
	waitFor(t, "the log of the registry back", func() bool { return logs.count(back) == 1 })
	time.Sleep(100 * time.Millisecond)
	if n, m := logs.count(warn), logs.count(back); n != 1 || m != 1 {
		t.Errorf("logged %d warnings and %d recoveries, want 1 each", n, m)
	}
	if n := logs.count(own); n != 0 {
		t.Errorf("the registry logged %d warnings of its own for an outage, want none beside the pool's", n)
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := p.Shutdown(sctx); err != nil {
		t.Fatal(err)
	}
}
