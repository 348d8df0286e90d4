package broker

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// scriptWork records, per script, the most items one call of it was given:
// the ids of a retry, the limit of a reap, a trim or a leases listing.
type scriptWork struct {
	mu    sync.Mutex
	items map[string]func(argv []any) int // by script hash
	most  map[string]int
	calls map[string]int
}

func (w *scriptWork) record(cmd redis.Cmder) {
	args := cmd.Args()
	if len(args) < 3 || (cmd.Name() != "evalsha" && cmd.Name() != "eval") {
		return
	}
	sha, _ := args[1].(string)
	if cmd.Name() == "eval" {
		sha = redis.NewScript(sha).Hash()
	}
	nkeys := toInt(args[2])
	w.mu.Lock()
	defer w.mu.Unlock()
	if f := w.items[sha]; f != nil {
		n := f(args[3+nkeys:])
		w.most[sha] = max(w.most[sha], n)
		w.calls[sha]++
	}
}

func toInt(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	case string:
		n, _ := strconv.Atoi(x)
		return n
	}
	return -1
}

func (w *scriptWork) DialHook(next redis.DialHook) redis.DialHook { return next }
func (w *scriptWork) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		w.record(cmd)
		return next(ctx, cmd)
	}
}
func (w *scriptWork) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			w.record(c)
		}
		return next(ctx, cmds)
	}
}

// Every operation that takes a count from its caller steps itself: asked
// for three and a bit steps' worth, RetryDead, Reap, Trim and the lease
// listings answer them all, and no single script call handles more than
// scriptStep items (invariant 8), whoever called with what count.
func TestCountedCallsStepThemselves(t *testing.T) {
	mr := miniredis.RunT(t)
	now := time.Now()
	mr.SetTime(now)
	advance := func(d time.Duration) { now = now.Add(d); mr.SetTime(now) }
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := New(c, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := b.scripts
	w := &scriptWork{most: map[string]int{}, calls: map[string]int{}, items: map[string]func([]any) int{
		s.retry.eval.Hash():  func(argv []any) int { return len(argv) - 2 }, // prefix, nonce, ids
		s.reap.eval.Hash():   func(argv []any) int { return toInt(argv[1]) },
		s.trim.eval.Hash():   func(argv []any) int { return toInt(argv[1]) },
		s.leases.eval.Hash(): func(argv []any) int { return toInt(argv[len(argv)-1]) },
	}}
	c.AddHook(w)
	ctx, q := context.Background(), "q"
	const n = 3*scriptStep + 7
	jobs := make([]Job, n)
	for i := range jobs {
		jobs[i] = Job{Queue: q, Kind: "k", MaxAttempts: 1}
	}
	for _, e := range b.Client().EnqueueMany(ctx, jobs) {
		if e.Err != nil {
			t.Fatal(e.Err)
		}
	}
	// Every job dead: claimed, its lease left to expire, reaped with its
	// one attempt spent.
	kill := func() {
		t.Helper()
		res, err := b.Leases().Claim(ctx, q, n, time.Second)
		if err != nil || len(res.Leases) != n {
			t.Fatalf("claim: %d leases, %v", len(res.Leases), err)
		}
		ls, err := b.Inspector().Leases(ctx, q, n)
		if err != nil || len(ls) != n {
			t.Fatalf("Leases(%d) = %d leases, %v", n, len(ls), err)
		}
		advance(2 * time.Second)
		ls, err = b.Inspector().ExpiredLeases(ctx, q, n)
		if err != nil || len(ls) != n {
			t.Fatalf("ExpiredLeases(%d) = %d leases, %v", n, len(ls), err)
		}
		r, err := b.Leases().Reap(ctx, q, n)
		if err != nil || len(r.Reaped) != n {
			t.Fatalf("Reap(%d) = %d reaped, %v", n, len(r.Reaped), err)
		}
	}
	kill()
	sent, err := b.Inspector().RetryDead(ctx, q, n+1)
	if err != nil || sent != n {
		t.Fatalf("RetryDead(%d) = %d, %v; want %d", n+1, sent, err, n)
	}
	kill()
	advance(ResendHorizon + time.Second) // past the horizon: retention may delete them
	deleted, err := b.Leases().Trim(ctx, q, Retention{Dead: time.Millisecond}, n)
	if err != nil || deleted != n {
		t.Fatalf("Trim = %d, %v; want %d", deleted, err, n)
	}
	for name, sc := range map[string]*script{"retry": s.retry, "reap": s.reap, "trim": s.trim, "leases": s.leases} {
		if w.calls[sc.eval.Hash()] == 0 {
			t.Errorf("no %s script ran", name)
		}
		if m := w.most[sc.eval.Hash()]; m > scriptStep {
			t.Errorf("one %s script call handled %d items; at most %d (scriptStep) are allowed", name, m, scriptStep)
		}
	}
}
