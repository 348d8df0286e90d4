package dashboard_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/dashboard"
)

// betweenReadAndWrite runs meanwhile, once armed, right after the first
// HMGET of a limits hash that the hooked client sends: another process's
// write arriving between the dashboard's read of the limits and its own
// write.
type betweenReadAndWrite struct {
	armed     atomic.Bool
	meanwhile func()
}

func (h *betweenReadAndWrite) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *betweenReadAndWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if args := cmd.Args(); cmd.Name() == "hmget" && len(args) > 1 && strings.HasSuffix(args[1].(string), ":limits") && h.armed.CompareAndSwap(true, false) {
			h.meanwhile()
		}
		return err
	}
}
func (h *betweenReadAndWrite) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestLimitsFormKeepsAConcurrentRate: an operator whose form changes only
// the period keeps the rate as it is when the form is applied. When
// another operator (another dashboard, or workerd limit) sets the rate
// while the form is being applied, after the dashboard read the limits and
// before it wrote them, the form writes back the rate it read and the
// other operator's rate is lost, though neither form nor page showed it.
func TestLimitsFormKeepsAConcurrentRate(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	other := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = other.Close() })
	ob, err := broker.New(other, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "mail", Kind: "send"}); err != nil {
		t.Fatal(err)
	}
	if err := b.Inspector().SetRate(ctx, "mail", 100, time.Second); err != nil {
		t.Fatal(err)
	}
	d, err := dashboard.New(dashboard.Config{Inspector: b.Inspector(), Token: token, Logger: slog.New(slog.NewTextHandler(&syncBuffer{}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d)
	t.Cleanup(srv.Close)
	r := &rig{t: t, b: b, mr: mr, srv: srv, logs: &syncBuffer{}}
	cl := r.client()
	r.signIn(cl)
	f := r.limitsForm(cl, "mail")
	if f.Get("rate") != "100" || f.Get("per") != "1s" {
		t.Fatalf("the form does not start from the rate 100 per 1s: %v", f)
	}
	f.Set("per", "1m") // this operator changes the period only
	f.Set("next", "/ui/queues/mail")

	hook := &betweenReadAndWrite{meanwhile: func() {
		if err := ob.Inspector().SetRate(ctx, "mail", 200, time.Second); err != nil { // the other operator's new rate
			t.Error(err)
		}
	}}
	c.AddHook(hook)
	hook.armed.Store(true)
	if resp, body := r.post(cl, "/ui/act/limits", f); resp.StatusCode != 303 {
		t.Fatalf("the limits form answered %d:\n%s", resp.StatusCode, body)
	}
	if hook.armed.Load() {
		t.Fatal("the form was applied without reading the limits: the test did not interleave")
	}
	l, err := b.Inspector().Limits(ctx, "mail")
	if err != nil {
		t.Fatal(err)
	}
	if want := (broker.Limits{Rate: 200, Per: time.Minute}); l != want {
		t.Errorf("a form that changed only the period left the limits %+v; want %+v: the rate another operator set meanwhile was overwritten by the one the form read", l, want)
	}
}
