package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/middleware"
	"github.com/fenceq/fenceq/worker"
)

const httpDefault = "127.0.0.1:9090"

func runRun(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "run", "[--config workerd.yaml] [flags]")
	var rf redisFlags
	rf.register(fs)
	var lf logFlags
	lf.register(fs)
	path := fs.String("config", "workerd.yaml", "config file")
	httpAddr := fs.String("http", "", `address of /healthz, /readyz and /metrics (default: the config's "http", else `+httpDefault+`; "off" disables)`)
	if _, err := parse(fs, "[--config workerd.yaml] [flags]", args, 0, 0); err != nil {
		return err
	}
	log, err := lf.logger(e.stderr)
	if err != nil {
		return err
	}
	cfg, err := loadConfig(*path)
	if err != nil {
		return err
	}
	mux, timeouts, err := cfg.mux(log)
	if err != nil {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["redis"] && e.getenv("REDIS_URL") == "" {
		rf.url = cfg.Redis
	}
	if !set["prefix"] && cfg.Prefix != "" {
		rf.prefix = cfg.Prefix
	}
	rdb, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := b.LoadScripts(ctx); err != nil {
		return &configError{fmt.Errorf("%w; the Redis user needs EVAL, EVALSHA and SCRIPT", err)}
	}

	var queues []string
	for _, p := range cfg.Pools {
		for _, q := range p.Queues {
			queues = append(queues, q.Name)
		}
	}
	m := newMetrics(b, queues)
	for i, pc := range cfg.Pools {
		wc := pc.workerConfig()
		wc.ShutdownTimeout = cfg.ShutdownTimeout.Duration
		wc.Logger = log.With(slog.Int("pool", i))
		wc.Middleware = []middleware.Middleware{m.middleware(), middleware.Timeout(0, timeouts)}
		wc.OnRenew = m.observeRenew
		if i == 0 { // schedules run once per process; any pool may carry them
			for j, pc := range cfg.Periodic {
				per, _ := cfg.periodic(j, pc) // checked by loadConfig
				wc.Periodic = append(wc.Periodic, per)
			}
		}
		p, err := worker.New(b, mux, wc)
		if err != nil {
			return &configError{fmt.Errorf("%s: pools[%d]: %w", *path, i, err)}
		}
		if err := p.Start(ctx); err != nil {
			shutdown(m.pools, cfg.ShutdownTimeout.Duration)
			return &configError{err}
		}
		m.pools = append(m.pools, p)
	}

	addr := cmp.Or(*httpAddr, cfg.HTTP, httpDefault)
	var srv *http.Server
	if addr != "off" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			shutdown(m.pools, cfg.ShutdownTimeout.Duration)
			return &configError{fmt.Errorf("listen on %s for /healthz, /readyz and /metrics: %w; pick another address with --http", addr, err)}
		}
		srv = &http.Server{Handler: endpoints(rdb, b, m), ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		log.Info("workerd serving /healthz, /readyz and /metrics", slog.String("addr", ln.Addr().String()))
	}
	log.Info("workerd running", slog.Int("pools", len(m.pools)), slog.Any("kinds", mux.Kinds()))

	<-ctx.Done()
	log.Info("workerd shutting down: finishing running jobs, releasing the rest")
	shutdown(m.pools, cfg.ShutdownTimeout.Duration)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	log.Info("workerd stopped")
	return nil
}

// shutdown stops the pools together.
func shutdown(pools []*worker.Pool, grace time.Duration) {
	grace = cmp.Or(grace, worker.ShutdownTimeoutDefault)
	ctx, cancel := context.WithTimeout(context.Background(), grace+10*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Add(1)
		go func() { defer wg.Done(); _ = p.Shutdown(ctx) }()
	}
	wg.Wait()
}

// endpoints serves liveness, readiness and metrics. None changes state.
func endpoints(rdb redis.UniversalClient, b *broker.Broker, m *metrics) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := rdb.Ping(ctx).Err(); err != nil {
			http.Error(w, "not ready: Redis unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		loaded, err := b.ScriptsLoaded(ctx)
		if err == nil && !loaded {
			err = b.LoadScripts(ctx) // flushed: load them again
		}
		if err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}))
	return mux
}
