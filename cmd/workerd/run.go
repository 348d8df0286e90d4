package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/internal/dashboard"
	"github.com/fenceq/fenceq/internal/version"
	"github.com/fenceq/fenceq/middleware"
	"github.com/fenceq/fenceq/worker"
)

const httpDefault = "127.0.0.1:9090"

// runRun is the production runner: it loads the config, connects, starts
// one pool per entry of pools, serves the endpoints, and at the first
// signal stops it all in order.
func runRun(ctx context.Context, e *env, args []string) error {
	o, err := parseRunFlags(e, args)
	if err != nil {
		return err
	}
	log, err := o.log.logger(e.stderr)
	if err != nil {
		return err
	}
	if o.redis.tracing, err = startTracing(ctx, e, log); err != nil {
		return err
	}
	defer stopTracing(o.redis.tracing, log)
	cfg, err := loadConfig(o.path)
	if err != nil {
		return err
	}
	mux, timeouts, err := cfg.mux(log)
	if err != nil {
		return err
	}
	o.defaultsFrom(cfg, e)
	tc, err := o.tls.config()
	if err != nil {
		return err
	}
	if o.apiToken != "" {
		if err := api.CheckToken(o.apiToken); err != nil {
			return &configError{fmt.Errorf("%s (from --api-token, FENCEQ_API_TOKEN or api_token)", strings.TrimPrefix(err.Error(), "api: "))}
		}
	}
	// Like the API's, the dashboard's token is checked before Redis is
	// reached: a config mistake is said at once, not after loading scripts.
	if err := dashboard.CheckToken(cmp.Or(cfg.UIToken, e.getenv("FENCEQ_UI_TOKEN"))); err != nil {
		return &configError{fmt.Errorf("%w (from ui_token or FENCEQ_UI_TOKEN)", err)}
	}
	rdb, b, err := connectForRun(ctx, e, &o.redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	r := &runner{e: e, cfg: cfg, log: log, b: b, m: newMetrics(b, configQueues(cfg))}
	if err := r.startPools(ctx, mux, timeouts); err != nil {
		return err
	}
	srv, err := r.serve(cmp.Or(o.httpAddr, cfg.HTTP, httpDefault), rdb, o.apiToken, tc)
	if err != nil {
		_ = shutdown(r.m.pools, cfg.ShutdownTimeout.Duration, e.hurry, log)
		return err
	}
	log.Info("workerd running", slog.String("version", version.String()), slog.Int("pools", len(r.m.pools)), slog.Any("kinds", mux.Kinds()))
	<-ctx.Done()
	return r.stop(ctx, srv)
}

// runFlags are run's command line.
type runFlags struct {
	redis    redisFlags
	log      logFlags
	tls      tlsFlags
	path     string // the config file
	httpAddr string // empty: the config's http, else httpDefault
	apiToken string // empty: FENCEQ_API_TOKEN, else the config's api_token
	given    map[string]bool
}

func parseRunFlags(e *env, args []string) (*runFlags, error) {
	const synopsis = "[--config workerd.yaml] [flags]"
	fs := newFlags(e, "run", synopsis)
	o := &runFlags{given: map[string]bool{}}
	o.redis.register(fs)
	o.log.register(fs)
	fs.StringVar(&o.path, "config", "workerd.yaml", "config file")
	fs.StringVar(&o.httpAddr, "http", "", `address of /healthz, /readyz, /metrics, the dashboard (/ui/) and, with an API token, the API (/v1/) (default: the config's "http", else `+httpDefault+`; "off" disables)`)
	fs.StringVar(&o.apiToken, "api-token", "", "bearer token of the HTTP API at /v1/ on the --http listener; none: the API is off (default $FENCEQ_API_TOKEN, else the config's api_token)")
	o.tls.register(fs, true)
	if _, err := parse(fs, synopsis, args, 0, 0); err != nil {
		return nil, err
	}
	fs.Visit(func(f *flag.Flag) { o.given[f.Name] = true })
	return o, nil
}

// defaultsFrom takes the Redis address and key prefix from the config
// where the command line does not give them (nor, for the address,
// REDIS_URL).
func (o *runFlags) defaultsFrom(cfg *fileConfig, e *env) {
	if !o.given["redis"] && e.getenv("REDIS_URL") == "" {
		o.redis.url = cfg.Redis
	}
	if !o.given["prefix"] && cfg.Prefix != "" {
		o.redis.prefix = cfg.Prefix
	}
	o.apiToken = cmp.Or(o.apiToken, e.getenv("FENCEQ_API_TOKEN"), cfg.APIToken)
	o.tls.fill(e, cfg.TLSCert, cfg.TLSKey)
}

// connectForRun connects and loads the scripts up front, so that a Redis
// user without the right to run them is a configuration error at start.
func connectForRun(ctx context.Context, e *env, rf *redisFlags) (redis.UniversalClient, *broker.Broker, error) {
	rdb, b, err := rf.connect(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	if err := b.LoadScripts(ctx); err != nil {
		rdb.Close()
		return nil, nil, &configError{fmt.Errorf("%w; the Redis user needs FCALL and FUNCTION (Redis 7), or EVAL, EVALSHA and SCRIPT", err)}
	}
	return rdb, b, nil
}

// runner is what the steps of one run share once it is connected. Its
// metrics hold the pools it started (m.pools).
type runner struct {
	e   *env
	cfg *fileConfig
	log *slog.Logger
	b   *broker.Broker
	m   *workerdMetrics
}

// configQueues names every queue of every pool, for the metrics.
func configQueues(cfg *fileConfig) []string {
	var queues []string
	for _, p := range cfg.Pools {
		for _, q := range p.Queues {
			queues = append(queues, q.Name)
		}
	}
	return queues
}

// startPools builds and starts one pool per entry of the config's pools,
// adding each to m.pools as it starts. When one fails to start, the pools
// started before it are shut down.
func (r *runner) startPools(ctx context.Context, mux *handlers.Mux, timeouts map[string]time.Duration) error {
	cfg, m, log := r.cfg, r.m, r.log
	for i, pc := range cfg.Pools {
		wc := pc.workerConfig()
		wc.ShutdownTimeout = cfg.ShutdownTimeout.Duration
		wc.Logger = log.With(slog.Int("pool", i))
		if wc.Name == "" {
			wc.Name = fmt.Sprintf("pool %d", i)
		}
		wc.Middleware = []middleware.Middleware{m.c.Middleware(), middleware.Timeout(0, timeouts)}
		wc.OnRenew = m.c.ObserveRenew
		wc.SchedulePoll = -1
		if i == 0 { // schedules run once per process; any pool may carry them
			for j, pc := range cfg.Periodic {
				per, _ := cfg.periodic(j, pc) // checked by loadConfig
				wc.Periodic = append(wc.Periodic, per)
			}
			wc.SchedulePoll = cfg.SchedulePoll.Duration // 0: the default
		}
		p, err := worker.New(r.b, mux, wc)
		if err != nil {
			return &configError{fmt.Errorf("%s: pools[%d]: %w", cfg.file, i, err)}
		}
		if err := p.Start(ctx); err != nil {
			_ = shutdown(m.pools, cfg.ShutdownTimeout.Duration, r.e.hurry, log)
			return &configError{err}
		}
		m.addPool(p)
	}
	return nil
}

// serve serves /healthz, /readyz, /metrics, the dashboard and, with an
// API token, the API at addr in the background, with TLS when tc is set;
// "off" serves nothing (a nil server).
func (r *runner) serve(addr string, rdb redis.UniversalClient, apiToken string, tc *tls.Config) (*http.Server, error) {
	if addr == "off" {
		if apiToken != "" {
			r.log.Warn("workerd run: an API token is set but http is off, so the API is not served; give an address with --http (or http in workerd.yaml)")
		}
		return nil, nil
	}
	ln, err := listenHTTP(addr, "/healthz, /readyz, /metrics, the dashboard and the API", "--http", tc, r.log)
	if err != nil {
		return nil, err
	}
	h := http.NewServeMux()
	hosts := r.cfg.UIAllowedHosts
	if len(hosts) == 0 {
		hosts = hostList(r.e.getenv("FENCEQ_UI_ALLOWED_HOSTS"))
	}
	proxy, err := uiProxyOf(r.e, r.cfg.UISecureCookie, r.cfg.UIClientAddrHeader)
	if err != nil {
		ln.Close()
		return nil, err
	}
	dash, err := mountDashboard(h, r.b, cmp.Or(r.cfg.UIToken, r.e.getenv("FENCEQ_UI_TOKEN")), hosts, proxy, r.log)
	if err != nil {
		ln.Close()
		return nil, err
	}
	endpoints(h, rdb, r.b, r.m, dash.CheckHost)
	base := baseURL(ln.Addr(), tc != nil)
	apiURL := "off: no api_token, FENCEQ_API_TOKEN or --api-token"
	if apiToken != "" {
		a, err := newAPI(r.b, apiToken, r.log)
		if err != nil {
			ln.Close()
			return nil, err
		}
		h.Handle(api.Mount, a)
		apiURL = base + api.Mount
	}
	srv := logServerErrors(newHTTPServer(h), r.log)
	go func() { _ = srv.Serve(ln) }()
	what := "workerd serving /healthz, /readyz, /metrics and the dashboard at /ui/"
	if apiToken != "" {
		what = "workerd serving /healthz, /readyz, /metrics, the dashboard at /ui/ and the API at /v1/"
	}
	r.log.Info(what, slog.String("addr", ln.Addr().String()),
		slog.String("dashboard", base+dashboard.Mount), slog.String("api", apiURL), slog.Bool("tls", tc != nil))
	return srv, nil
}

// stop shuts the pools down within the config's shutdown_timeout (or at
// once on a second signal), then the endpoints: gracefully after a clean
// shutdown, abruptly after a hurried one.
func (r *runner) stop(ctx context.Context, srv *http.Server) error {
	log := r.log
	grace := cmp.Or(r.cfg.ShutdownTimeout.Duration, worker.ShutdownTimeoutDefault)
	log.Info("workerd shutting down: running jobs may finish within shutdown_timeout, then they are cancelled and released; "+
		"a second SIGINT or SIGTERM (Ctrl-C) stops at once",
		slog.Any("reason", context.Cause(ctx)), slog.String("shutdown_timeout", grace.String()),
		slog.String("at_most", (grace+shutdownSlack+httpShutdownTimeout).String()))
	err := shutdown(r.m.pools, grace, r.e.hurry, log)
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		defer cancel()
		if err != nil || srv.Shutdown(sctx) != nil {
			_ = srv.Close() // API waits still blocked: their clients wait again
		}
	}
	log.Info("workerd stopped")
	return err
}

const (
	// shutdownSlack is what shutdown waits beyond the grace period: up to
	// 5 s for handlers that ignore their cancelled context (the worker's
	// abandon delay), and 5 s to release leases and stop the pools' loops.
	shutdownSlack = 10 * time.Second
	// httpShutdownTimeout bounds the wait for requests to the endpoints
	// once the pools have stopped.
	httpShutdownTimeout = 5 * time.Second
)

// errHurried ends a command stopped by a second interrupt.
var errHurried = errors.New("stopped by a second signal before the running jobs finished; " +
	"their leases were released, so other workers run them again (any lease that could not be released expires and is reaped)")

// shutdown stops the pools together, waiting at most grace+shutdownSlack.
// When hurry closes first, it stops waiting: each pool's Shutdown sees its
// context cancelled, cancels its running handlers (handlers.ErrShutdown)
// and releases their leases without waiting for them to return; shutdown
// then answers errHurried.
func shutdown(pools []*worker.Pool, grace time.Duration, hurry <-chan struct{}, log *slog.Logger) error {
	grace = cmp.Or(grace, worker.ShutdownTimeoutDefault)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	tctx, tcancel := context.WithTimeout(ctx, grace+shutdownSlack)
	defer tcancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-hurry:
			log.Warn("workerd stopping now (second signal): running jobs are cancelled and their leases released, " +
				"so other workers take them at once; a lease that cannot be released expires and is reaped: no job is lost")
			cancel(errHurried)
		case <-tctx.Done():
		}
	}()
	var wg sync.WaitGroup
	for _, p := range pools {
		wg.Go(func() { _ = p.Shutdown(tctx) })
	}
	wg.Wait()
	tcancel()
	<-watched
	if errors.Is(context.Cause(ctx), errHurried) {
		return errHurried
	}
	return nil
}

// interrupts turns the signals arriving on sigs into a stop in two steps:
// the first cancels ctx (its cause names the signal): finish the running
// jobs, then stop; the second closes hurry: stop now. It then calls done,
// which gives a third signal its default effect, for a workerd that hangs
// anyway. Closing sigs ends the watch.
func interrupts(parent context.Context, sigs <-chan os.Signal, done func()) (ctx context.Context, hurry <-chan struct{}) {
	ctx, cancel := context.WithCancelCause(parent)
	h := make(chan struct{})
	go func() {
		s, ok := <-sigs
		if !ok {
			return
		}
		cancel(fmt.Errorf("received %v", s))
		if _, ok := <-sigs; !ok {
			return
		}
		close(h)
		done()
	}()
	return ctx, h
}

// endpoints adds liveness, readiness and metrics to mux. None changes
// state. Metrics name the queues and count their jobs, so they answer only
// the Host names checkHost allows (the dashboard's: DNS rebinding);
// liveness and readiness tell nothing and answer any Host.
func endpoints(mux *http.ServeMux, rdb redis.UniversalClient, b *broker.Broker, m *workerdMetrics, checkHost func(http.Handler) http.Handler) {
	probes(mux, rdb, b)
	mux.Handle("GET /metrics", checkHost(promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{})))
}

// probes adds liveness (/healthz) and readiness (/readyz: Redis answers
// and the scripts are loaded) to mux: workerd run's and workerd api's.
func probes(mux *http.ServeMux, rdb redis.UniversalClient, b *broker.Broker) {
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
}
