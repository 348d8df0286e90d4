package main

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/middleware"
	"github.com/fenceq/fenceq/worker"
)

// metrics are workerd's Prometheus metrics: handler runs observed by a
// middleware, the pools' own counters, renew latency, and queue depth and
// Redis's memory read from Redis at each scrape.
type metrics struct {
	reg      *prometheus.Registry
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
	renew    prometheus.Histogram
	pools    []*worker.Pool
	b        *broker.Broker
	queues   []string
}

func newMetrics(b *broker.Broker, queues []string) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(), b: b, queues: queues,
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
	m.reg.MustRegister(m.runs, m.duration, m.renew, m, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// middleware times every handler run.
func (m *metrics) middleware() middleware.Middleware {
	return func(next handlers.Handler) handlers.Handler {
		return handlers.HandlerFunc(func(ctx context.Context, job *handlers.Job) error {
			start := time.Now()
			err := next.ProcessJob(ctx, job)
			if handlers.NoHandler(job, err) {
				// Not a run: the pool gives the job back (fenceq_jobs_given_back_total),
				// and a kind nobody handles must not add label values.
				return err
			}
			m.duration.WithLabelValues(job.Queue, job.Kind).Observe(time.Since(start).Seconds())
			result := "ok"
			if err != nil {
				result = "error"
			}
			m.runs.WithLabelValues(job.Queue, job.Kind, result).Inc()
			return err
		})
	}
}

func (m *metrics) observeRenew(took time.Duration, _ int, _ error) { m.renew.Observe(took.Seconds()) }

var (
	poolCounters = []struct {
		desc *prometheus.Desc
		get  func(worker.Stats) int64
	}{
		{desc("fenceq_jobs_claimed_total", "Jobs claimed."), func(s worker.Stats) int64 { return s.Claimed }},
		{desc("fenceq_jobs_succeeded_total", "Jobs settled done."), func(s worker.Stats) int64 { return s.Succeeded }},
		{desc("fenceq_jobs_retried_total", "Failed jobs scheduled for a retry."), func(s worker.Stats) int64 { return s.Retried }},
		{desc("fenceq_jobs_dead_total", "Jobs that failed for good."), func(s worker.Stats) int64 { return s.Dead }},
		{desc("fenceq_jobs_cancelled_total", "Jobs settled as cancelled."), func(s worker.Stats) int64 { return s.Cancelled }},
		{desc("fenceq_jobs_released_total", "Jobs given back (shutdown, or a lease that ran out locally)."), func(s worker.Stats) int64 { return s.Released }},
		{desc("fenceq_jobs_given_back_total", "Jobs of a kind no handler is configured for, given back uncharged to wait for a runner that has it."), func(s worker.Stats) int64 { return s.GivenBack }},
		{desc("fenceq_stale_settlements_total", "Settlements rejected because the claim was no longer valid."), func(s worker.Stats) int64 { return s.Stale }},
		{desc("fenceq_leases_lost_total", "Handlers cancelled because their lease was lost or could not be renewed."), func(s worker.Stats) int64 { return s.LeasesLost }},
		{desc("fenceq_leases_reaped_total", "Expired leases this process recovered."), func(s worker.Stats) int64 { return s.Reaped }},
	}
	runningDesc = prometheus.NewDesc("fenceq_jobs_running", "Handlers running now.", []string{"pool"}, nil)
	depthDesc   = prometheus.NewDesc("fenceq_queue_jobs", "Jobs in a queue by state, read from Redis at scrape time.", []string{"queue", "state"}, nil)
	usedDesc    = prometheus.NewDesc("fenceq_redis_used_memory_bytes",
		"Redis used_memory (INFO memory) of each server that holds data (each Cluster master), read at scrape time.", []string{"node"}, nil)
	maxDesc = prometheus.NewDesc("fenceq_redis_maxmemory_bytes",
		"Redis maxmemory of each server that holds data, read at scrape time; 0 means no limit. With noeviction, writes fail once used_memory reaches it.", []string{"node"}, nil)
)

func desc(name, help string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, []string{"pool"}, nil)
}

// Describe and Collect make metrics a collector of the pools' counters and
// the queues' depth.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range poolCounters {
		ch <- c.desc
	}
	ch <- runningDesc
	ch <- depthDesc
	ch <- usedDesc
	ch <- maxDesc
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	for i, p := range m.pools {
		s, label := p.Stats(), poolLabel(i)
		for _, c := range poolCounters {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(c.get(s)), label)
		}
		ch <- prometheus.MustNewConstMetric(runningDesc, prometheus.GaugeValue, float64(s.Running), label)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for _, q := range m.queues {
		c, err := m.b.Inspector().Counts(ctx, q)
		if err != nil {
			ch <- prometheus.NewInvalidMetric(depthDesc, errors.Join(errors.New("read queue "+q), err))
			continue
		}
		for state, n := range map[broker.State]int64{
			broker.StateScheduled: c.Scheduled, broker.StatePending: c.Pending, broker.StateRunning: c.Running,
			broker.StateDone: c.Done, broker.StateDead: c.Dead, broker.StateCancelled: c.Cancelled,
		} {
			ch <- prometheus.MustNewConstMetric(depthDesc, prometheus.GaugeValue, float64(n), q, string(state))
		}
	}
	m.collectMemory(ctx, ch)
}

// collectMemory exports each server's used_memory and maxmemory. A server
// that does not report them (miniredis, or INFO denied by an ACL) leaves
// the two gauges out; a read that fails fails the scrape, as depth does.
func (m *metrics) collectMemory(ctx context.Context, ch chan<- prometheus.Metric) {
	ms, err := m.b.Inspector().ServerMemory(ctx)
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

func poolLabel(i int) string { return strconv.Itoa(i) }
