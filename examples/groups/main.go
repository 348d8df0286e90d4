// Command groups shows fenceq's job groups: a limit per customer, a rate
// per API key, and groups whose jobs run in order. Each job names its group
// (Job.Group); the queue's group limits, set once with
// Inspector.ChangeGroupLimits (or `workerd limit QUEUE --group-…`), hold for
// every pool of every process. It enqueues a few jobs, runs one pool until
// they are done, and prints what it saw.
//
//	go run ./examples/groups                      # Redis at 127.0.0.1:6379
//	go run ./examples/groups -redis host:port
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

func main() {
	addr := flag.String("redis", "127.0.0.1:6379", "Redis address")
	prefix := flag.String("prefix", "fenceq-groups-example", "key prefix")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if err := run(*addr, *prefix, log); err != nil {
		log.Error("groups example failed", "error", err)
		os.Exit(1)
	}
}

// seen records, per group, how many of its jobs ran at once at most, when
// each started, and in which order.
type seen struct {
	mu      sync.Mutex
	running map[string]int
	most    map[string]int
	starts  map[string][]time.Time
	order   map[string][]int
}

func (s *seen) start(group string, n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[group]++
	s.most[group] = max(s.most[group], s.running[group])
	s.starts[group] = append(s.starts[group], time.Now())
	s.order[group] = append(s.order[group], n)
}

func (s *seen) end(group string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running[group]--
}

func run(addr, prefix string, log *slog.Logger) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	b, err := broker.New(rdb, broker.Options{Prefix: prefix})
	if err != nil {
		return err
	}
	in := b.Inspector()

	// reports: one report at a time per customer, three for big-corp.
	if _, err := in.ChangeGroupLimits(ctx, "reports", "", broker.GroupLimitsChange{
		To: broker.GroupLimits{MaxRunning: 1}, MaxRunning: true}); err != nil {
		return err
	}
	if _, err := in.ChangeGroupLimits(ctx, "reports", "big-corp", broker.GroupLimitsChange{
		To: broker.GroupLimits{MaxRunning: 3}, MaxRunning: true}); err != nil {
		return err
	}
	// webhooks: at most 5 calls per second per API key, spaced 200ms apart.
	if _, err := in.ChangeGroupLimits(ctx, "webhooks", "", broker.GroupLimitsChange{
		To: broker.GroupLimits{Rate: 5, Per: time.Second}, Rate: true, Per: true}); err != nil {
		return err
	}
	// ledger: each account's entries run one at a time, in order.
	if _, err := in.ChangeGroupLimits(ctx, "ledger", "", broker.GroupLimitsChange{
		To: broker.GroupLimits{Ordered: true}, Ordered: true}); err != nil {
		return err
	}

	s := &seen{running: map[string]int{}, most: map[string]int{}, starts: map[string][]time.Time{}, order: map[string][]int{}}
	mux := handlers.NewMux()
	work := func(d time.Duration) handlers.HandlerFunc {
		return func(ctx context.Context, job *handlers.Job) error {
			var n int
			_ = json.Unmarshal(job.Payload, &n)
			s.start(job.Queue+"/"+job.Group, n)
			defer s.end(job.Queue + "/" + job.Group)
			select {
			case <-time.After(d):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		}
	}
	mux.HandleFunc("report", work(40*time.Millisecond))
	mux.HandleFunc("webhook", work(time.Millisecond))
	mux.HandleFunc("entry", work(5*time.Millisecond))
	pool, err := worker.New(b, mux, worker.Config{
		Queues:      []worker.Queue{{Name: "reports"}, {Name: "webhooks"}, {Name: "ledger"}},
		Concurrency: 16,
		Logger:      log,
	})
	if err != nil {
		return err
	}
	if err := pool.Start(ctx); err != nil {
		return err
	}

	var jobs []broker.Job
	for n := range 6 {
		payload := []byte(fmt.Sprint(n))
		for _, customer := range []string{"acme", "globex", "big-corp"} {
			jobs = append(jobs, broker.Job{Queue: "reports", Kind: "report", Group: customer, Payload: payload})
		}
		for _, key := range []string{"key-a", "key-b"} {
			jobs = append(jobs, broker.Job{Queue: "webhooks", Kind: "webhook", Group: key, Payload: payload})
		}
		for _, account := range []string{"acct-1", "acct-2"} {
			jobs = append(jobs, broker.Job{Queue: "ledger", Kind: "entry", Group: account, Payload: payload})
		}
	}
	type queued struct{ queue, id string }
	var ids []queued
	for i, r := range b.Client().EnqueueMany(ctx, jobs) {
		if r.Err != nil {
			return r.Err
		}
		ids = append(ids, queued{jobs[i].Queue, r.ID})
	}
	for _, q := range ids {
		if _, err := b.Client().Wait(ctx, q.queue, q.id); err != nil {
			return err
		}
	}
	if err := pool.Shutdown(ctx); err != nil {
		return err
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	fmt.Printf("reports, most running at once: acme=%d globex=%d big-corp=%d (limits 1, 1, 3)\n",
		s.most["reports/acme"], s.most["reports/globex"], s.most["reports/big-corp"])
	for _, key := range []string{"key-a", "key-b"} {
		st := s.starts["webhooks/"+key]
		gap := time.Duration(0)
		for i := 1; i < len(st); i++ {
			if d := st[i].Sub(st[i-1]); i == 1 || d < gap {
				gap = d
			}
		}
		fmt.Printf("webhooks %s: %d calls, the closest %v apart (the rate spaces them 200ms on Redis's clock)\n", key, len(st), gap.Round(10*time.Millisecond))
	}
	for _, account := range []string{"acct-1", "acct-2"} {
		o := s.order["ledger/"+account]
		fmt.Printf("ledger %s: entries ran in the order %v, in order=%v, most at once=%d\n", account, o, slices.IsSorted(o), s.most["ledger/"+account])
	}
	return nil
}
