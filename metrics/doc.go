// Package metrics exports a fenceq pool's Prometheus metrics: its job
// counters, handler run times, heartbeat latency, the queues' depth and
// Redis's memory, read at each scrape.
//
// An embedded pool registers in one line:
//
//	c, err := metrics.Register(prometheus.DefaultRegisterer, b.Inspector(), pool, "emails")
//
// That exports the pool's counters (fenceq_jobs_claimed_total, …), and for
// each queue named, read from Redis at the scrape: its depth by state
// (fenceq_queue_jobs), the age of its oldest pending job
// (fenceq_queue_oldest_pending_age_seconds), and counters of the jobs every
// pool settled done, failed or killed (fenceq_queue_succeeded_total,
// fenceq_queue_failed_total, fenceq_queue_dead_total), which start at 0 on
// the process's first scrape; then Redis's memory and fenceq_build_info.
// Handler runs, the jobs claimed by queue (fenceq_queue_claimed_total) and
// renew latency are observed from inside the pool, so they need the
// collector in the pool's config before worker.New:
//
//	c := metrics.New(b.Inspector(), "emails")
//	cfg.Middleware = append(cfg.Middleware, c.Middleware())
//	cfg.OnRenew = c.ObserveRenew
//	pool, err := worker.New(b, mux, cfg)
//	...
//	c.AddPool(pool)
//	prometheus.MustRegister(c)
//
// The collector reads through small interfaces (Reader, Pool), never a
// concrete broker or pool type, so any type with those methods serves. It
// starts no goroutine: every Redis read happens inside Collect, bounded by
// a 2 s timeout, three round trips per queue, and QueuesMax queues. No job
// pays a Redis command for any metric. It never imports cmd/ or internal/dashboard.
package metrics
