// Package metrics exports a fenceq pool's Prometheus metrics: its job
// counters, handler run times, heartbeat latency, the queues' depth and
// Redis's memory, read at each scrape.
//
// An embedded pool registers in one line:
//
//	c, err := metrics.Register(prometheus.DefaultRegisterer, b.Inspector(), pool, "emails")
//
// That exports the pool's counters (fenceq_jobs_claimed_total, …), the
// depth of the queues named (fenceq_queue_jobs) and Redis's memory. Handler
// runs and renew latency are observed from inside the pool, so they need
// the collector in the pool's config before worker.New:
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
// a 2 s timeout. It never imports cmd/ or internal/dashboard.
package metrics
