package brokertest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// gate is a go-redis hook that holds a script call (or a pipeline) sent
// with a context from hold until it is released: the request is in
// flight, and its caller waits for the answer. Other commands pass, so a
// queue's registration is not held.
type gate struct{}

type gateKey struct{}

// gateHold is one request held by the gate.
type gateHold struct {
	once    sync.Once
	entered chan struct{} // closed when the request reaches the gate
	release chan struct{} // close to let it go on
}

// hold returns a context whose requests the gate holds, and the handle.
func hold(ctx context.Context) (context.Context, *gateHold) {
	h := &gateHold{entered: make(chan struct{}), release: make(chan struct{})}
	return context.WithValue(ctx, gateKey{}, h), h
}

// wait holds a script call sent with a context of hold's (its retries
// included, such as EVAL after NOSCRIPT).
func (gate) wait(ctx context.Context, cmds ...redis.Cmder) {
	h, ok := ctx.Value(gateKey{}).(*gateHold)
	if !ok {
		return
	}
	for _, c := range cmds {
		if name := c.Name(); name == "evalsha" || name == "eval" || name == "fcall" {
			h.once.Do(func() { close(h.entered) })
			<-h.release
			return
		}
	}
}

func (gate) DialHook(next redis.DialHook) redis.DialHook { return next }

func (g gate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		g.wait(ctx, cmd)
		return next(ctx, cmd)
	}
}

func (g gate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		g.wait(ctx, cmds...)
		return next(ctx, cmds)
	}
}

// gated is setup with the gate on the test's client, and a Batcher.
func gated(t *testing.T, nb NewBackend, o broker.BatcherOptions) (*bundle, *broker.Batcher) {
	t.Helper()
	be := nb(t)
	be.Client.AddHook(gate{})
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	bt, err := broker.NewBatcher(s.b.Client(), o)
	noErr(t, "NewBatcher", err)
	t.Cleanup(func() { _ = bt.Close() })
	return s, bt
}

// answer is one Batcher.Enqueue's return.
type answer struct {
	id  string
	err error
}

// behind holds the Batcher's round trip on a first job, enqueues jobs with
// ctx from one goroutine each while it is held, one after the other, and
// lets it go once they all wait, so that they reach Redis in the order of
// jobs, in as few round trips as the Batcher's bounds allow. It answers
// the first job's id and the others' answers, in the order of jobs.
func behind(t *testing.T, s *bundle, bt *broker.Batcher, ctx context.Context, jobs []broker.Job) (string, []answer) {
	t.Helper()
	holding, h := hold(s.ctx)
	first := make(chan answer, 1)
	go func() {
		id, err := bt.Enqueue(holding, broker.Job{Queue: s.q, Kind: "first"})
		first <- answer{id, err}
	}()
	<-h.entered
	out := make([]answer, len(jobs))
	var wg sync.WaitGroup
	waiting := bt.Stats().Waiting
	for i, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id, err := bt.Enqueue(ctx, j)
			out[i] = answer{id, err}
		}()
		if s.b.Client().ValidateJob(j) != nil {
			continue // refused at once, never waits
		}
		waiting++
		for bt.Stats().Waiting < waiting {
			runtime.Gosched() // on its way: no timing involved
		}
	}
	close(h.release)
	wg.Wait()
	f := <-first
	noErr(t, "the first job", f.err)
	return f.id, out
}

// The Batcher answers each job as Enqueue would, also when the jobs of one
// round trip refuse each other.
func testBatcherAnswers(t *testing.T, nb NewBackend) {
	s, bt := gated(t, nb, broker.BatcherOptions{})
	s.enqueue(t, broker.Job{ID: "taken"})
	holder := s.enqueue(t, broker.Job{UniqueKey: "held"})
	before := bt.Stats()
	_, res := behind(t, s, bt, s.ctx, []broker.Job{
		{Queue: s.q, Kind: "plain"},
		{Queue: s.q, Kind: "chosen", ID: "chosen"},
		{Queue: s.q, Kind: "dup", ID: "taken"},
		{Queue: s.q, Kind: "held", UniqueKey: "held"},
		{Queue: s.q, Kind: "orphan", DependsOn: []string{"nope"}},
		{Queue: s.q, Kind: ""}, // invalid: refused before it is sent
		{Queue: s.q, Kind: "twin", ID: "twin"},
		{Queue: s.q, Kind: "twin", ID: "twin"},
		{Queue: s.q, Kind: "pair", UniqueKey: "pair"},
		{Queue: s.q, Kind: "pair", UniqueKey: "pair"},
		{Queue: "other", Kind: "elsewhere", Delay: long},
	})
	after := bt.Stats()
	want(t, "round trips for eleven jobs behind a held one", after.Batches-before.Batches, int64(2))

	noErr(t, "plain job", res[0].err)
	want(t, "its state", s.job(t, res[0].id).State, broker.StatePending)
	noErr(t, "chosen id", res[1].err)
	want(t, "chosen id", res[1].id, "chosen")
	var dup *broker.DuplicateError
	if !errors.As(res[2].err, &dup) || dup.ID != "taken" || dup.State != broker.StatePending {
		t.Fatalf("duplicate id: error %v, want a *DuplicateError naming the pending job", res[2].err)
	}
	var uh *broker.UniqueHeldError
	if !errors.As(res[3].err, &uh) || uh.HolderID != holder || uh.Key != "held" || res[3].id != holder {
		t.Fatalf("held unique key: %q, %v; want the holder %s and a *UniqueHeldError", res[3].id, res[3].err, holder)
	}
	wantErr(t, "missing dependency", res[4].err, broker.ErrInvalid)
	wantErr(t, "invalid job", res[5].err, broker.ErrInvalid)

	// Two callers with one id in one round trip: the first creates it, the
	// second finds it taken, as two Enqueues would.
	noErr(t, "the first of two jobs with one id", res[6].err)
	wantErr(t, "the second of two jobs with one id", res[7].err, broker.ErrJobExists)
	// And with one unique key: the second names the first.
	noErr(t, "the first of two jobs with one unique key", res[8].err)
	if !errors.As(res[9].err, &uh) || uh.HolderID != res[8].id || res[9].id != res[8].id {
		t.Fatalf("the second of two jobs with one unique key: %q, %v; want the first, %s", res[9].id, res[9].err, res[8].id)
	}
	noErr(t, "job of another queue", res[10].err)
	j, err := s.b.Inspector().Job(s.ctx, "other", res[10].id)
	noErr(t, "Job in the other queue", err)
	want(t, "delayed job's state", j.State, broker.StateScheduled)

	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending: taken, held, first, plain, chosen, twin, pair", c.Pending, int64(7))
	s.consistent(t)
}

// Many goroutines enqueue at once: every job is stored once, with its own
// id, in fewer round trips than jobs whenever they overlap.
func testBatcherConcurrent(t *testing.T, nb NewBackend) {
	s, bt := gated(t, nb, broker.BatcherOptions{MaxJobs: 16})
	const callers, each = 20, 25
	ids := make(chan string, callers*each)
	var wg sync.WaitGroup
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				j := broker.Job{Queue: s.q, Kind: "k", Payload: []byte(fmt.Sprint(c, i))}
				if i%5 == 0 {
					j.ID = fmt.Sprintf("c%d-%d", c, i)
				}
				id, err := bt.Enqueue(s.ctx, j)
				if err != nil {
					t.Errorf("Enqueue: %v", err)
					return
				}
				ids <- id
			}
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("id %s answered twice", id)
		}
		seen[id] = true
	}
	want(t, "ids", len(seen), callers*each)
	noErr(t, "Close", bt.Close())
	st := bt.Stats()
	want(t, "jobs sent", st.Jobs, int64(callers*each))
	if st.Batches > st.Jobs || st.Jobs > 16*st.Batches {
		t.Fatalf("%d jobs in %d round trips of at most 16", st.Jobs, st.Batches)
	}
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending", c.Pending, int64(callers*each))
	s.consistent(t)
}

// A caller that gives up before its job is sent leaves nothing behind; one
// that gives up while its job is in flight learns the job's id and that
// the job may be stored, and the round trip completes for every job in it.
func testBatcherCancel(t *testing.T, nb NewBackend) {
	t.Run("Waiting", func(t *testing.T) {
		s, bt := gated(t, nb, broker.BatcherOptions{})
		ctx, h := hold(s.ctx)
		first := make(chan error, 1)
		go func() {
			_, err := bt.Enqueue(ctx, broker.Job{Queue: s.q, Kind: "first"})
			first <- err
		}()
		<-h.entered
		gone, cancel := context.WithCancel(s.ctx)
		res := make(chan answer, 1)
		go func() {
			id, err := bt.Enqueue(gone, broker.Job{Queue: s.q, Kind: "k", ID: "given-up"})
			res <- answer{id, err}
		}()
		for bt.Stats().Waiting < 1 {
			runtime.Gosched()
		}
		cancel()
		a := <-res
		wantErr(t, "a job given up while waiting", a.err, context.Canceled)
		if errors.Is(a.err, broker.ErrOutcomeUnknown) || a.id != "" {
			t.Fatalf("a job never sent answered %q, %v; want no id and the context's error alone", a.id, a.err)
		}
		close(h.release)
		noErr(t, "the first job", <-first)
		noErr(t, "Close", bt.Close())
		_, err := s.b.Inspector().Job(s.ctx, s.q, "given-up")
		wantErr(t, "the job given up", err, broker.ErrJobNotFound)
		want(t, "jobs sent", bt.Stats().Jobs, int64(1))
		s.consistent(t)
	})
	t.Run("InFlight", func(t *testing.T) {
		s, bt := gated(t, nb, broker.BatcherOptions{})
		holding, h := hold(s.ctx)
		ctx, cancel := context.WithCancel(holding)
		res := make(chan answer, 1)
		go func() {
			id, err := bt.Enqueue(ctx, broker.Job{Queue: s.q, Kind: "k"})
			res <- answer{id, err}
		}()
		<-h.entered
		cancel()
		a := <-res
		wantErr(t, "a job given up in flight", a.err, broker.ErrOutcomeUnknown)
		wantErr(t, "a job given up in flight", a.err, context.Canceled)
		if a.id == "" {
			t.Fatal("a job given up in flight answered no id")
		}
		close(h.release)
		noErr(t, "Close", bt.Close()) // the round trip completes
		want(t, "the job given up in flight", s.job(t, a.id).State, broker.StatePending)
		// Enqueued again under its id, it is found kept.
		_, err := s.b.Client().Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", ID: a.id})
		wantErr(t, "the job enqueued again", err, broker.ErrJobExists)
		s.consistent(t)
	})
	t.Run("AlreadyDone", func(t *testing.T) {
		s, bt := gated(t, nb, broker.BatcherOptions{})
		ctx, cancel := context.WithCancel(s.ctx)
		cancel()
		_, err := bt.Enqueue(ctx, broker.Job{Queue: s.q, Kind: "k"})
		wantErr(t, "Enqueue with a done context", err, context.Canceled)
		want(t, "round trips", bt.Stats().Batches, int64(0))
	})
}

// Close waits for the jobs taken, sent or not, and refuses new ones.
func testBatcherClose(t *testing.T, nb NewBackend) {
	s, bt := gated(t, nb, broker.BatcherOptions{MaxJobs: 2})
	ctx, h := hold(s.ctx)
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	enqueue := func(ctx context.Context) {
		defer wg.Done()
		_, err := bt.Enqueue(ctx, broker.Job{Queue: s.q, Kind: "k"})
		errs <- err
	}
	wg.Add(1)
	go enqueue(ctx)
	<-h.entered
	for range 5 {
		wg.Add(1)
		go enqueue(s.ctx)
	}
	for bt.Stats().Waiting < 5 {
		runtime.Gosched()
	}
	closed := make(chan struct{})
	go func() {
		_ = bt.Close()
		close(closed)
	}()
	select {
	case <-closed:
		t.Fatal("Close returned while a round trip was held")
	default:
	}
	close(h.release)
	<-closed
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending once Close returned", c.Pending, int64(6))
	st := bt.Stats()
	want(t, "round trips: the held one, then three of at most two", st.Batches, int64(4))
	want(t, "waiting after Close", st.Waiting, 0)
	wg.Wait()
	close(errs)
	for err := range errs {
		noErr(t, "a job taken before Close", err)
	}

	_, err := bt.Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "late", ID: "late"})
	wantErr(t, "Enqueue after Close", err, broker.ErrBatcherClosed)
	_, err = s.b.Inspector().Job(s.ctx, s.q, "late")
	wantErr(t, "a job refused after Close", err, broker.ErrJobNotFound)
	noErr(t, "a second Close", bt.Close())
}

// MaxJobs and MaxBytes bound a round trip; a job above MaxBytes goes on
// its own.
func testBatcherBounds(t *testing.T, nb NewBackend) {
	s, bt := gated(t, nb, broker.BatcherOptions{MaxJobs: 3, MaxBytes: 1000})
	var jobs []broker.Job
	for range 6 {
		jobs = append(jobs, broker.Job{Queue: s.q, Kind: "small", Payload: make([]byte, 10)})
	}
	for range 3 {
		jobs = append(jobs, broker.Job{Queue: s.q, Kind: "big", Payload: make([]byte, 600)})
	}
	jobs = append(jobs, broker.Job{Queue: s.q, Kind: "huge", Payload: make([]byte, 5000)})
	_, res := behind(t, s, bt, s.ctx, jobs)
	for i, a := range res {
		noErr(t, fmt.Sprint("job ", i), a.err)
	}
	// In order: three small, three small, each big one alone (two would
	// pass 1000 bytes), the huge one alone; and the held one.
	want(t, "round trips", bt.Stats().Batches, int64(7))
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending", c.Pending, int64(11))

	_, err := broker.NewBatcher(s.b.Client(), broker.BatcherOptions{MaxJobs: -1})
	wantErr(t, "NewBatcher with MaxJobs -1", err, broker.ErrInvalid)
	_, err = broker.NewBatcher(s.b.Client(), broker.BatcherOptions{MaxBytes: -2})
	wantErr(t, "NewBatcher with MaxBytes -2", err, broker.ErrInvalid)
}

// A round trip whose reply is lost and that is sent again answers every job
// as the first send did: created, or, for the second of two jobs with one
// id, a duplicate.
func testBatcherLostReply(t *testing.T, nb NewBackend) {
	be := nb(t)
	be.Client.AddHook(gate{})
	be.Client.AddHook(resend{})
	s, cleanup := on(t, be)
	t.Cleanup(cleanup)
	bt, err := broker.NewBatcher(s.b.Client(), broker.BatcherOptions{})
	noErr(t, "NewBatcher", err)
	defer bt.Close()
	lost := context.WithValue(s.ctx, resendKey{}, true)
	_, res := behind(t, s, bt, lost, []broker.Job{
		{Queue: s.q, Kind: "k", ID: "mine"},
		{Queue: s.q, Kind: "k"},
		{Queue: s.q, Kind: "k", UniqueKey: "u"},
		{Queue: s.q, Kind: "k", ID: "twin"},
		{Queue: s.q, Kind: "k", ID: "twin"},
	})
	for i, a := range res[:4] {
		noErr(t, fmt.Sprint("job ", i, " sent twice"), a.err)
	}
	want(t, "chosen id", res[0].id, "mine")
	wantErr(t, "the second of two jobs with one id, sent twice", res[4].err, broker.ErrJobExists)
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending after a round trip sent twice", c.Pending, int64(5))
	s.consistent(t)
}

// Close while many goroutines enqueue: each job is either stored and
// answered so, or refused with ErrBatcherClosed and not stored; none is
// stored without its caller being told, and none waits forever.
func testBatcherCloseRace(t *testing.T, nb NewBackend) {
	s, bt := gated(t, nb, broker.BatcherOptions{MaxJobs: 4})
	const callers, each = 10, 20
	var stored, refused sync.Map
	var wg sync.WaitGroup
	started := make(chan struct{}, callers*each)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("c%d-%d", c, i)
				started <- struct{}{}
				_, err := bt.Enqueue(s.ctx, broker.Job{Queue: s.q, Kind: "k", ID: id})
				switch {
				case err == nil:
					stored.Store(id, true)
				case errors.Is(err, broker.ErrBatcherClosed):
					refused.Store(id, true)
				default:
					t.Errorf("Enqueue %s: %v", id, err)
				}
			}
		}()
	}
	for range callers * each / 3 {
		<-started
	}
	noErr(t, "Close", bt.Close())
	wg.Wait()
	n := 0
	stored.Range(func(k, _ any) bool {
		n++
		want(t, "state of a job answered stored", s.job(t, k.(string)).State, broker.StatePending)
		return true
	})
	refused.Range(func(k, _ any) bool {
		_, err := s.b.Inspector().Job(s.ctx, s.q, k.(string))
		wantErr(t, "a job refused by a closed Batcher", err, broker.ErrJobNotFound)
		return true
	})
	c, _ := s.b.Inspector().Counts(s.ctx, s.q)
	want(t, "pending", c.Pending, int64(n))
	want(t, "jobs sent", bt.Stats().Jobs, int64(n))
	s.consistent(t)
}
