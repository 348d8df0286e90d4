package worker

import (
	"context"
	"log/slog"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// checkServer refuses a server the pool cannot work with (unreachable, or
// older than broker.MinRedisMajor.MinRedisMinor) and warns about settings
// that can lose jobs. A check the server does not support (as on
// miniredis) is skipped, never failed.
func checkServer(ctx context.Context, b *broker.Broker, log *slog.Logger) error {
	s, err := b.CheckServer(ctx)
	if err != nil {
		return err
	}
	if s.VersionErr != nil {
		log.Debug("fenceq cannot read the Redis version; not checking it", slog.Any("error", s.VersionErr))
	}
	switch {
	case s.MaxMemoryPolicy == "":
		log.Debug("fenceq cannot read maxmemory-policy; not checking it", slog.Any("error", s.PolicyErr))
	case s.Evicts():
		log.Warn("fenceq: Redis maxmemory-policy is not noeviction: when memory runs out Redis may EVICT job hashes and leases, and those jobs are LOST. Set maxmemory-policy noeviction.",
			slog.String("maxmemory_policy", s.MaxMemoryPolicy))
	}
	return nil
}

// BytesPerJobDefault is what the memory check assumes one job costs in
// Redis (its hash and its index entry) while its queue has no job to
// measure: a done job of a 64-byte payload measures 488 bytes on Redis 7,
// and its index entry 132 (docs/operations.md, "Sizing Redis").
const BytesPerJobDefault = 600

// rateWindow is how far back the memory check looks for a queue's rate of
// finished jobs, to size retention that is bounded by age only.
const rateWindow = 60

// checkMemory warns when Redis could fill up and stop the queues: when it
// has no maxmemory (the OS kills it when the machine runs out), or when
// its maxmemory is smaller than what the pool's retention keeps. It never
// refuses to start, and skips a server that does not report its memory.
// On a Cluster, each master is weighed against the pool's queues it holds.
func (p *Pool) checkMemory(ctx context.Context) {
	r := p.cfg.trimRetention() // broker.Leases.Trim's terms: 0 is no limit
	type node struct {
		mem       broker.ServerMemory
		queues    []string
		kept      int64 // finished jobs retention keeps, at most
		need      int64 // their bytes
		unbounded []string
	}
	var nodes []*node
	byAddr := map[string]*node{}
	for _, q := range p.queueNames() {
		m, err := p.b.Inspector().QueueMemory(ctx, q)
		if err != nil {
			p.log.Debug("fenceq cannot read Redis's memory; not checking maxmemory", slog.Any("error", err))
			return
		}
		n := byAddr[m.Node]
		if n == nil {
			n = &node{mem: m}
			byAddr[m.Node] = n
			nodes = append(nodes, n)
		}
		n.queues = append(n.queues, q)
		kept, unbounded, err := keptJobs(ctx, p.b, q, r)
		if err != nil {
			p.log.Debug("fenceq cannot read a queue's throughput; not checking maxmemory", slog.String("queue", q), slog.Any("error", err))
			return
		}
		n.kept += kept
		n.need += kept * bytesPerJob(ctx, p.b, q)
		for _, s := range unbounded {
			n.unbounded = append(n.unbounded, q+" "+s)
		}
	}
	for _, n := range nodes {
		attrs := []any{slog.String("node", n.mem.Node), slog.Any("queues", n.queues), slog.Int64("used_memory", n.mem.Used)}
		switch {
		case n.mem.Max == 0:
			p.log.Warn("fenceq: Redis has no maxmemory: if it fills the machine's memory the OS kills it; set maxmemory (see docs/operations.md, Sizing Redis) and keep maxmemory-policy noeviction", attrs...)
		case n.need > n.mem.Max || len(n.unbounded) > 0:
			p.log.Warn("fenceq: Redis maxmemory may be too small for what retention keeps: when it is full every write fails and the queues stop; raise maxmemory or keep fewer finished jobs (Config.Retention), see docs/operations.md, Sizing Redis",
				append(attrs, slog.Int64("maxmemory", n.mem.Max), slog.Int64("retention_bytes", n.need), slog.Int64("retained_jobs", n.kept),
					slog.Any("kept_forever", n.unbounded))...)
		}
	}
}

// keptJobs is how many finished jobs of queue retention r keeps at most: a
// count bound as it is, an age bound times the queue's recent rate (done
// jobs per minute for done; failed attempts, an upper bound, for dead)
// only when no count bounds it. It also answers the states r keeps
// forever. A cancelled job counts nothing under an age-only bound: no
// counter records cancellations.
func keptJobs(ctx context.Context, b *broker.Broker, queue string, r broker.Retention) (int64, []string, error) {
	var doneRate, failRate float64
	if r.Done > 0 && r.MaxDone == 0 || r.Dead > 0 && r.MaxDead == 0 {
		ms, err := b.Inspector().Throughput(ctx, queue, rateWindow)
		if err != nil {
			return 0, nil, err
		}
		for _, m := range ms {
			doneRate += float64(m.Done) / rateWindow
			failRate += float64(m.Failed) / rateWindow
		}
	}
	var kept int64
	var forever []string
	for _, s := range []struct {
		name  string
		age   time.Duration
		count int
		rate  float64
	}{
		{"done", r.Done, r.MaxDone, doneRate},
		{"cancelled", r.Cancelled, r.MaxCancelled, 0},
		{"dead", r.Dead, r.MaxDead, failRate},
	} {
		byAge := int64(s.rate * s.age.Minutes())
		switch {
		case s.count > 0:
			// What the count lets retention keep, whatever the rate: a
			// fresh queue's rate (0) would promise nothing.
			kept += int64(s.count)
		case s.age > 0:
			kept += byAge
		default:
			forever = append(forever, s.name)
		}
	}
	return kept, forever, nil
}

// bytesPerJob is what one job of queue costs, hash and index entry, by
// sampling; BytesPerJobDefault when there is nothing to sample.
func bytesPerJob(ctx context.Context, b *broker.Broker, queue string) int64 {
	f, err := b.Inspector().Footprint(ctx, queue)
	if err != nil || !f.Measured || f.Sampled == 0 {
		return BytesPerJobDefault
	}
	if n := f.PerState[broker.StateDone]; n > 0 {
		return n + f.PerIndexEntry // retention keeps finished jobs: size them as those
	}
	return f.PerJob + f.PerIndexEntry
}
