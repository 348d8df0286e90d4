package brokertest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// holdWoken holds the first Wait caller of a broker built on it between its
// wake-up and its look at the job: the slow caller that a settlement woke
// but that has not read the job yet.
type holdWoken struct {
	once    sync.Once
	woken   chan struct{} // closed once the caller took its wake-up
	release chan struct{} // the caller looks once this is closed
}

func (h *holdWoken) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *holdWoken) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *holdWoken) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && strings.EqualFold(cmd.Name(), "blpop") {
			h.once.Do(func() {
				close(h.woken)
				<-h.release
			})
		}
		return err
	}
}

// hookedBroker is a second broker on the bundle's server and prefix, whose
// own client runs hook.
func (s *bundle) hookedBroker(t *testing.T, hook redis.Hook) *broker.Broker {
	t.Helper()
	var c redis.UniversalClient
	switch orig := s.Client.(type) {
	case *redis.Client:
		c = redis.NewClient(&redis.Options{Addr: orig.Options().Addr})
	case *redis.ClusterClient:
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: orig.Options().Addrs, MaxRedirects: orig.Options().MaxRedirects})
	default:
		t.Skipf("no second client for a %T", s.Client)
	}
	t.Cleanup(func() { _ = c.Close() })
	c.AddHook(hook)
	b, err := broker.New(c, broker.Options{Prefix: s.b.Prefix()})
	noErr(t, "broker.New", err)
	return b
}

// A caller of Wait gets the job it waited for even when, before it looked,
// that job was trimmed, its id enqueued again, waited on, finished and
// trimmed too: each end keeps its own record for its callers (trim.lua's
// final:<n>:<id>). There was one record per id, which the second trim
// overwrote: the slow caller got ErrJobNotFound.
func testWaitKeepsEachIncarnation(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	trim := func() {
		t.Helper()
		s.pastHorizon()
		n, err := s.b.Leases().Trim(s.ctx, s.q, broker.Retention{Done: time.Millisecond}, 100)
		noErr(t, "Trim", err)
		want(t, "jobs trimmed", n, 1)
	}
	type answer struct {
		j   broker.JobInfo
		err error
	}

	hold := &holdWoken{woken: make(chan struct{}), release: make(chan struct{})}
	slow := s.hookedBroker(t, hold)
	id := s.enqueue(t, broker.Job{ID: "x"})
	first := make(chan answer, 1)
	go func() {
		j, err := slow.Client().Wait(s.ctx, s.q, id)
		first <- answer{j, err}
	}()
	s.waitedOn(t, id)
	_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), []byte("one"))
	noErr(t, "Ack of the first job", err)
	select {
	case <-hold.woken:
	case <-time.After(10 * time.Second):
		t.Fatal("the first caller of Wait was not woken by the first job's ack")
	}
	trim()

	s.enqueue(t, broker.Job{ID: id})
	second := make(chan answer, 1)
	go func() {
		j, err := s.b.Client().Wait(s.ctx, s.q, id)
		second <- answer{j, err}
	}()
	s.waitedOn(t, id)
	_, err = s.b.Leases().Ack(s.ctx, s.claimOne(t, long), []byte("two"))
	noErr(t, "Ack of the second job", err)
	select {
	case a := <-second:
		noErr(t, "Wait for the second job", a.err)
		want(t, "the second caller's result", string(a.j.Result), "two")
	case <-time.After(10 * time.Second):
		t.Fatal("Wait for the second job did not return after its ack")
	}
	trim()

	close(hold.release)
	select {
	case a := <-first:
		noErr(t, "Wait for the first job, which looks after the second was trimmed", a.err)
		want(t, "the first caller's state", a.j.State, broker.StateDone)
		want(t, "the first caller's result", string(a.j.Result), "one")
	case <-time.After(10 * time.Second):
		t.Fatal("Wait for the first job did not return")
	}
	// A new caller, who registered on neither, gets the newest end.
	j, err := s.b.Client().Wait(s.ctx, s.q, id)
	noErr(t, "Wait after both were trimmed", err)
	want(t, "a new caller's result", string(j.Result), "two")
	s.consistent(t)
}

// A caller of Wait whose context is cancelled returns at once, not when its
// blocking pop (up to a second) ends. The bound is generous: before, it
// took the rest of the second.
func testWaitReturnsWhenCancelled(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{})
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.b.Client().Wait(ctx, s.q, id)
		done <- err
	}()
	s.waitedOn(t, id)
	time.Sleep(50 * time.Millisecond) // into its blocking pop
	start := time.Now()
	cancel()
	select {
	case err := <-done:
		wantErr(t, "Wait past its context", err, context.Canceled)
		d := time.Since(start)
		t.Logf("Wait returned %v after its context was cancelled", d)
		if d > 300*time.Millisecond {
			t.Fatalf("Wait returned %v after its context was cancelled; want at once", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after its context was cancelled")
	}

	// Cancelled at any point, before its pop, during it or as it ends, a
	// Wait leaves no token behind to end a later pop.
	for i := range 10 {
		ctx, cancel := context.WithCancel(s.ctx)
		go func() {
			_, err := s.b.Client().Wait(ctx, s.q, id)
			done <- err
		}()
		time.Sleep(time.Duration(i) * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			wantErr(t, "Wait past its context", err, context.Canceled)
		case <-time.After(10 * time.Second):
			t.Fatal("Wait did not return after its context was cancelled")
		}
	}
	if left := s.keysMatching(t, s.b.Prefix()+":{"+s.q+"}:waiter:*"); len(left) > 0 {
		t.Fatalf("cancelled calls of Wait left %q behind", left)
	}

	// The job's end still wakes the next caller.
	got := make(chan error, 1)
	go func() {
		_, err := s.b.Client().Wait(s.ctx, s.q, id)
		got <- err
	}()
	_, err := s.b.Leases().Ack(s.ctx, s.claimOne(t, long), nil)
	noErr(t, "Ack", err)
	select {
	case err := <-got:
		noErr(t, "Wait after a cancelled one", err)
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return after the ack")
	}
}

// keysMatching lists the keys that match pattern, on every master of a
// Cluster.
func (s *bundle) keysMatching(t *testing.T, pattern string) []string {
	t.Helper()
	var keys []string
	var mu sync.Mutex
	scan := func(ctx context.Context, node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	var err error
	if cc, ok := s.Client.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(s.ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	} else {
		err = scan(s.ctx, s.Client)
	}
	noErr(t, "SCAN "+pattern, err)
	return keys
}
