package metrics

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/middleware"
	"github.com/fenceq/fenceq/worker"
)

// Reader is what the collector reads from Redis at scrape time: the
// counts of a queue and the memory of each server. *broker.Inspector
// (Broker.Inspector) has both methods.
type Reader interface {
	Counts(ctx context.Context, queue string) (broker.Counts, error)
	ServerMemory(ctx context.Context) ([]broker.ServerMemory, error)
}

// Pool is what the collector reads from a pool: its counters.
// *worker.Pool has it.
type Pool interface {
	Stats() worker.Stats
}

// scrapeTimeout bounds the Redis reads of one scrape.
const scrapeTimeout = 2 * time.Second

// Collector is a prometheus.Collector of fenceq's metrics. Its pools are
// labelled "pool" by the order AddPool was called in, from "0".
type Collector struct {
	r        Reader
	queues   []string
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	renew    prometheus.Histogram

	mu    sync.Mutex
	pools []Pool
}

// New returns a collector that reads queue depth and Redis memory through
// r, for the queues named. A nil r reads nothing from Redis.
func New(r Reader, queues ...string) *Collector {
	return &Collector{
		r: r, queues: queues,
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "fenceq_handler_runs_total",
			Help: "Handler runs by queue, kind and result (ok, error).",
		}, []string{"queue", "kind", "result"}),
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
	usedDesc    = prometheus.NewDesc("fenceq_redis_used_memory_bytes",
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
	c.duration.Describe(ch)
	c.renew.Describe(ch)
	for _, pc := range poolCounters {
		ch <- pc.desc
	}
	ch <- runningDesc
	ch <- depthDesc
	ch <- usedDesc
	ch <- maxDesc
}

// Collect sends the metrics: the handler runs and renew rounds observed,
// each pool's counters, and each queue's depth and each server's memory
// read from Redis now.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	c.runs.Collect(ch)
	c.duration.Collect(ch)
	c.renew.Collect(ch)
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
	for _, q := range c.queues {
		n, err := c.r.Counts(ctx, q)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(depthDesc, errors.Join(errors.New("read queue "+q), err))
			continue
		}
		for state, v := range map[broker.State]int64{
			broker.StateScheduled: n.Scheduled, broker.StatePending: n.Pending, broker.StateRunning: n.Running,
			broker.StateDone: n.Done, broker.StateDead: n.Dead, broker.StateCancelled: n.Cancelled,
		} {
			ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(v), q, string(state))
		}
	}
	c.collectMemory(ctx, ch)
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
