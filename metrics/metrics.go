package metrics

import (
	"context"
	"errors"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/internal/version"
	"github.com/fenceq/fenceq/middleware"
	"github.com/fenceq/fenceq/worker"
)

// Reader is what the collector reads from Redis at scrape time: a queue's
// overview (its counts and the age of its oldest pending job), its
// per-minute settlements, its newest deaths, and the memory of each
// server. *broker.Inspector (Broker.Inspector) has every method.
type Reader interface {
	Overview(ctx context.Context, queue string) (broker.Overview, error)
	Throughput(ctx context.Context, queue string, minutes int) ([]broker.Minute, error)
	DeadSince(ctx context.Context, queue string, after int64) (n, newest int64, err error)
	ServerMemory(ctx context.Context) ([]broker.ServerMemory, error)
}

// Pool is what the collector reads from a pool: its counters.
// *worker.Pool has it.
type Pool interface {
	Stats() worker.Stats
}

// scrapeTimeout bounds the Redis reads of one scrape.
const scrapeTimeout = 2 * time.Second

// QueuesMax bounds the queues a scrape reads: three round trips each, so
// that a scrape stays well within scrapeTimeout. A collector named more
// reads the first QueuesMax and says how many it left out
// (fenceq_scrape_queues_left_out).
const QueuesMax = 200

// Collector is a prometheus.Collector of fenceq's metrics. Its pools are
// labelled "pool" by the order AddPool was called in, from "0".
type Collector struct {
	r        Reader
	queues   []string
	leftOut  int // queues named past QueuesMax
	runs     *prometheus.CounterVec
	claimed  *prometheus.CounterVec
	duration *prometheus.HistogramVec
	renew    prometheus.Histogram

	mu    sync.Mutex
	pools []Pool

	// scrape serialises the Redis reads of concurrent scrapes: each moves
	// the queues' counters on from what the one before it read.
	scrape sync.Mutex
	totals map[string]*queueTotals
}

// New returns a collector that reads queue depth and Redis memory through
// r, for the queues named. A nil r reads nothing from Redis.
func New(r Reader, queues ...string) *Collector {
	var leftOut int
	if len(queues) > QueuesMax {
		queues, leftOut = queues[:QueuesMax], len(queues)-QueuesMax
	}
	return &Collector{
		r: r, queues: queues, leftOut: leftOut, totals: map[string]*queueTotals{},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceq_handler_runs_total",
			Help: "Handler runs by queue, kind and result (ok, error).",
		}, []string{"queue", "kind", "result"}),
		claimed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceq_queue_claimed_total",
			Help: "Jobs this process's pools claimed and handed to their handlers, by queue (counted by Middleware).",
		}, []string{"queue"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "fenceq_job_duration_seconds",
			Help:    "Handler run time by queue and kind.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"queue", "kind"}),
		renew: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "fenceq_renew_duration_seconds",
			Help:    "Duration of a heartbeat round (one batched renew of all of a pool's leases).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8),
		}),
	}
}

// Register builds a collector for r and the queues named, adds pool to
// it and registers it on reg. It is the one line an embedded pool needs.
func Register(reg prometheus.Registerer, r Reader, pool Pool, queues ...string) (*Collector, error) {
	c := New(r, queues...)
	if pool != nil {
		c.AddPool(pool)
	}
	if err := reg.Register(c); err != nil {
		return nil, err
	}
	return c, nil
}

// AddPool adds a pool's counters to the collector.
func (c *Collector) AddPool(p Pool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pools = append(c.pools, p)
}

// Middleware times every handler run (fenceq_handler_runs_total and
// fenceq_job_duration_seconds). Put it in worker.Config.Middleware.
func (c *Collector) Middleware() middleware.Middleware {
	return func(next handlers.Handler) handlers.Handler {
		return handlers.HandlerFunc(func(ctx context.Context, job *handlers.Job) error {
			c.claimed.WithLabelValues(job.Queue).Inc()
			start := time.Now()
			err := next.ProcessJob(ctx, job)
			if handlers.NoHandler(job, err) {
				// Not a run: the pool gives the job back (fenceq_jobs_given_back_total),
				// and a kind nobody handles must not add label values.
				return err
			}
			c.duration.WithLabelValues(job.Queue, job.Kind).Observe(time.Since(start).Seconds())
			result := "ok"
			if err != nil {
				result = "error"
			}
			c.runs.WithLabelValues(job.Queue, job.Kind, result).Inc()
			return err
		})
	}
}

// ObserveRenew records a heartbeat round (fenceq_renew_duration_seconds).
// Its signature is worker.Config.OnRenew's.
func (c *Collector) ObserveRenew(took time.Duration, _ int, _ error) {
	c.renew.Observe(took.Seconds())
}

var (
	poolCounters = []struct {
		desc *prometheus.Desc
		get  func(worker.Stats) int64
	}{
		{poolDesc("fenceq_jobs_claimed_total", "Jobs claimed."), func(s worker.Stats) int64 { return s.Claimed }},
		{poolDesc("fenceq_jobs_succeeded_total", "Jobs settled done."), func(s worker.Stats) int64 { return s.Succeeded }},
		{poolDesc("fenceq_jobs_retried_total", "Failed jobs scheduled for a retry."), func(s worker.Stats) int64 { return s.Retried }},
		{poolDesc("fenceq_jobs_dead_total", "Jobs that failed for good."), func(s worker.Stats) int64 { return s.Dead }},
		{poolDesc("fenceq_jobs_cancelled_total", "Jobs settled as cancelled."), func(s worker.Stats) int64 { return s.Cancelled }},
		{poolDesc("fenceq_jobs_released_total", "Jobs given back (shutdown, or a lease that ran out locally)."), func(s worker.Stats) int64 { return s.Released }},
		{poolDesc("fenceq_jobs_given_back_total", "Jobs of a kind no handler is configured for, given back uncharged to wait for a runner that has it."), func(s worker.Stats) int64 { return s.GivenBack }},
		{poolDesc("fenceq_stale_settlements_total", "Settlements rejected because the claim was no longer valid."), func(s worker.Stats) int64 { return s.Stale }},
		{poolDesc("fenceq_leases_lost_total", "Handlers cancelled because their lease was lost or could not be renewed."), func(s worker.Stats) int64 { return s.LeasesLost }},
		{poolDesc("fenceq_leases_reaped_total", "Expired leases this process recovered."), func(s worker.Stats) int64 { return s.Reaped }},
	}
	runningDesc = prometheus.NewDesc("fenceq_jobs_running", "Handlers running now.", []string{"pool"}, nil)
	depthDesc   = prometheus.NewDesc("fenceq_queue_jobs", "Jobs in a queue by state, read from Redis at scrape time.", []string{"queue", "state"}, nil)
	oldestDesc  = prometheus.NewDesc("fenceq_queue_oldest_pending_age_seconds",
		"How long the queue's next job to be claimed has been due, read from Redis at scrape time; 0 when nothing is pending.", []string{"queue"}, nil)
	succeededDesc = prometheus.NewDesc("fenceq_queue_succeeded_total",
		"Jobs of the queue settled done by any pool, from the queue's per-minute counters in Redis, since this process's first scrape.", []string{"queue"}, nil)
	failedDesc = prometheus.NewDesc("fenceq_queue_failed_total",
		"Attempts of the queue's jobs that failed (retried or dead) on any pool, from the queue's per-minute counters in Redis, since this process's first scrape.", []string{"queue"}, nil)
	deadDesc = prometheus.NewDesc("fenceq_queue_dead_total",
		"Jobs of the queue that became dead on any pool, from the queue's dead index in Redis, since this process's first scrape (a job retried or deleted before the next scrape is not counted).", []string{"queue"}, nil)
	leftOutDesc = prometheus.NewDesc("fenceq_scrape_queues_left_out",
		"Queues named to the collector past metrics.QueuesMax, which no scrape reads.", nil, nil)
	buildDesc = prometheus.NewDesc("fenceq_build_info",
		"Always 1: the fenceq version (a release tag, or devel for a checkout) and the Go version it was built with.", []string{"version", "goversion"}, nil)
	usedDesc = prometheus.NewDesc("fenceq_redis_used_memory_bytes",
		"Redis used_memory (INFO memory) of each server that holds data (each Cluster master), read at scrape time.", []string{"node"}, nil)
	maxDesc = prometheus.NewDesc("fenceq_redis_maxmemory_bytes",
		"Redis maxmemory of each server that holds data, read at scrape time; 0 means no limit. With noeviction, writes fail once used_memory reaches it.", []string{"node"}, nil)
)

func poolDesc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"pool"}, nil)
}

// Describe sends the descriptions of every metric the collector exports.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	c.runs.Describe(ch)
	c.claimed.Describe(ch)
	c.duration.Describe(ch)
	c.renew.Describe(ch)
	for _, pc := range poolCounters {
		ch <- pc.desc
	}
	ch <- runningDesc
	ch <- depthDesc
	ch <- oldestDesc
	ch <- succeededDesc
	ch <- failedDesc
	ch <- deadDesc
	ch <- leftOutDesc
	ch <- buildDesc
	ch <- usedDesc
	ch <- maxDesc
}

// Collect sends the metrics: the handler runs and renew rounds observed,
// each pool's counters, and each queue's depth and each server's memory
// read from Redis now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.runs.Collect(ch)
	c.claimed.Collect(ch)
	c.duration.Collect(ch)
	c.renew.Collect(ch)
	ch <- prometheus.MustNewConstMetric(buildDesc, prometheus.GaugeValue, 1, version.String(), runtime.Version())
	ch <- prometheus.MustNewConstMetric(leftOutDesc, prometheus.GaugeValue, float64(c.leftOut))
	c.mu.Lock()
	pools := append([]Pool(nil), c.pools...)
	c.mu.Unlock()
	for i, p := range pools {
		s, label := p.Stats(), strconv.Itoa(i)
		for _, pc := range poolCounters {
			ch <- prometheus.MustNewConstMetric(pc.desc, prometheus.CounterValue, float64(pc.get(s)), label)
		}
		ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(s.Running), label)
	}
	if c.r == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	c.scrape.Lock()
	defer c.scrape.Unlock()
	for _, q := range c.queues {
		if err := c.collectQueue(ctx, ch, q); err != nil {
			ch <- prometheus.NewInvalidMetric(depthDesc, errors.Join(errors.New("read queue "+q), err))
		}
	}
	c.collectMemory(ctx, ch)
}

// collectQueue exports a queue's depth by state, the age of its oldest
// pending job and its settlement counters: three round trips (the
// overview, the minutes since the last scrape, the newest deaths).
func (c *Collector) collectQueue(ctx context.Context, ch chan<- prometheus.Metric, q string) error {
	o, err := c.r.Overview(ctx, q)
	if err != nil {
		return err
	}
	t := c.totals[q]
	if t == nil {
		t = &queueTotals{}
		c.totals[q] = t
	}
	minutes, err := c.r.Throughput(ctx, q, t.minutesToRead(time.Now()))
	if err != nil {
		return err
	}
	died, newest, err := c.r.DeadSince(ctx, q, t.deadAfter)
	if err != nil {
		return err
	}
	t.add(minutes, time.Now())
	t.addDead(died, newest)
	for state, v := range map[broker.State]int64{
		broker.StateBlocked: o.Blocked, broker.StateScheduled: o.Scheduled, broker.StatePending: o.Pending, broker.StateRunning: o.Running,
		broker.StateDone: o.Done, broker.StateDead: o.Dead, broker.StateCancelled: o.Cancelled,
	} {
		ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(v), q, string(state))
	}
	ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, o.HeadAge.Seconds(), q)
	ch <- prometheus.MustNewConstMetric(succeededDesc, prometheus.CounterValue, float64(t.done), q)
	ch <- prometheus.MustNewConstMetric(failedDesc, prometheus.CounterValue, float64(t.failed), q)
	ch <- prometheus.MustNewConstMetric(deadDesc, prometheus.CounterValue, float64(t.dead), q)
	return nil
}

// collectMemory exports each server's used_memory and maxmemory. A server
// that does not report them (miniredis, or INFO denied by an ACL) leaves
// the two gauges out; a read that fails fails the scrape, as depth does.
func (c *Collector) collectMemory(ctx context.Context, ch chan<- prometheus.Metric) {
	ms, err := c.r.ServerMemory(ctx)
	switch {
	case errors.Is(err, broker.ErrNoMemoryInfo):
		return
	case err != nil:
		ch <- prometheus.NewInvalidMetric(usedDesc, err)
		return
	}
	for _, s := range ms {
		ch <- prometheus.MustNewConstMetric(usedDesc, prometheus.GaugeValue, float64(s.Used), s.Node)
		ch <- prometheus.MustNewConstMetric(maxDesc, prometheus.GaugeValue, float64(s.Max), s.Node)
	}
}
