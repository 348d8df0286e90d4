package metrics_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
	"github.com/fenceq/fenceq/metrics"
	"github.com/fenceq/fenceq/worker"
)

// samples gathers reg and answers each sample of name as "labels value".
func samples(t *testing.T, reg prometheus.Gatherer, name string) []string {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var out []string
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue()
			out = append(out, strings.Join(labels, ",")+" "+strconv.FormatFloat(v, 'g', -1, 64))
		}
	}
	return out
}

// An embedded pool registered in one line exports its counters and its
// queue's depth once a job has run.
func TestRegisterEmbeddedPool(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	pool, err := worker.New(b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		ran <- struct{}{}
		return nil
	}), worker.Config{Queues: []worker.Queue{{Name: "q"}}, Concurrency: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := pool.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Shutdown(context.Background()) })

	reg := prometheus.NewRegistry()
	if _, err := metrics.Register(reg, b.Inspector(), pool, "q"); err != nil {
		t.Fatalf("Register: %v", err)
	}

	if _, err := b.Client().Enqueue(t.Context(), broker.Job{Queue: "q", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	<-ran
	deadline := time.Now().Add(5 * time.Second)
	for {
		got := strings.Join(samples(t, reg, "fenceq_jobs_succeeded_total"), ";")
		done := strings.Join(samples(t, reg, "fenceq_queue_jobs"), ";")
		if got == "pool=0 1" && strings.Contains(done, "queue=q,state=done 1") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("succeeded %q, depth %q: want pool=0 1 and one done job", got, done)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if claimed := samples(t, reg, "fenceq_jobs_claimed_total"); strings.Join(claimed, ";") != "pool=0 1" {
		t.Fatalf("claimed %v, want pool=0 1", claimed)
	}
}

// A job that no handler ran (a Mux without its kind) is not a run; one that
// a Mux ran is, an error when a Mux nested in its handler lacks the kind.
func TestMetricsUnknownKindInsideAHandler(t *testing.T) {
	c := metrics.New(nil)
	inner, outer := handlers.NewMux(), handlers.NewMux()
	outer.HandleFunc("report", inner.ProcessJob)
	h := c.Middleware()(outer)
	for _, kind := range []string{"report", "new"} {
		j := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{Queue: "q", Kind: kind}})
		if err := h.ProcessJob(t.Context(), j); !errors.Is(err, handlers.ErrUnknownKind) {
			t.Fatalf("ProcessJob(%s) = %v, want an UnknownKindError", kind, err)
		}
	}
	reg := prometheus.NewRegistry() // no Reader: nothing read from Redis
	reg.MustRegister(c)
	fams, err := reg.Gather()
	if err != nil {
		t.Fatalf("Gather: %v", err)
	}
	var runs []string
	for _, f := range fams {
		if f.GetName() != "fenceq_handler_runs_total" {
			continue
		}
		for _, c := range f.GetMetric() {
			var labels []string
			for _, l := range c.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			runs = append(runs, strings.Join(labels, ",")+" "+strconv.FormatFloat(c.GetCounter().GetValue(), 'g', -1, 64))
		}
	}
	if want := []string{"kind=report,queue=q,result=error 1"}; strings.Join(runs, ";") != strings.Join(want, ";") {
		t.Fatalf("runs %v, want %v", runs, want)
	}
	// Both were claimed, and handed to the handler chain.
	if claimed := samples(t, reg, "fenceq_queue_claimed_total"); strings.Join(claimed, ";") != "queue=q 2" {
		t.Fatalf("claimed %v, want queue=q 2", claimed)
	}
}
