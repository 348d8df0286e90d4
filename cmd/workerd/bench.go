package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/bench"
	"github.com/fenceq/fenceq/worker"
)

const benchSynopsis = "[--redis URL] [--json] [--trace] [--jobs N] [--groups N [--groups-rounds N] | --soak DURATION [--soak-concurrency N] [--retention default|age-only]]"

// runBench writes only keys under a prefix of its own, new for each run,
// and deletes them however it ends (an error, Ctrl-C), so it can run
// against a Redis that holds other data: it never flushes a database.
func runBench(ctx context.Context, e *env, args []string) error {
	o, err := parseBenchFlags(e, args)
	if err != nil {
		return err
	}
	if o.trace {
		o.redis.tracing = benchTracing()
		defer stopTracing(o.redis.tracing, slog.New(slog.NewTextHandler(e.stderr, nil)))
	}
	rdb, err := o.connect(ctx, e)
	if err != nil {
		return err
	}
	defer rdb.Close()
	cfg := bench.Config{
		Redis: rdb,
		Dial: func(ctx context.Context) (redis.UniversalClient, error) {
			c, _, err := o.redis.connect(ctx, e)
			return c, err
		},
		Prefix: o.redis.prefix, Stdout: e.stdout, Stderr: e.stderr,
	}
	if o.redis.tracing != nil { // a nil *TracerProvider in the interface would not read as nil
		cfg.Tracing = o.redis.tracing
	}
	bn := bench.New(ctx, cfg)
	r, err := bn.Run(bench.Options{Jobs: o.jobs, JSON: o.asJSON, Soak: o.soak, Groups: o.groups})
	if derr := bn.DeleteOnExit(); derr != nil {
		return errors.Join(err, derr)
	}
	switch {
	case ctx.Err() != nil:
		return fmt.Errorf("interrupted; its keys (%s:*) are deleted", o.redis.prefix)
	case err != nil:
		return err
	}
	return o.print(e, r)
}

// benchFlags are bench's command line.
type benchFlags struct {
	redis  redisFlags
	flush  bool // ignored
	asJSON bool
	trace  bool // trace every job, into an exporter that drops the spans
	jobs   int  // per throughput measurement
	soak   bench.SoakOptions
	groups bench.GroupsOptions
}

// parseBenchFlags parses and checks bench's flags, refusing those that
// would make bench write outside its own keys or measure something else
// than one server.
func parseBenchFlags(e *env, args []string) (*benchFlags, error) {
	fs := newFlags(e, "bench", benchSynopsis)
	o := &benchFlags{}
	o.redis.register(fs)
	fs.BoolVar(&o.flush, "flush", false, "ignored, kept so that older scripts still run: bench deletes only its own keys and never flushes a database")
	fs.BoolVar(&o.asJSON, "json", false, "print one JSON object instead of a table")
	fs.IntVar(&o.jobs, "jobs", 20000, "jobs per throughput measurement")
	fs.BoolVar(&o.trace, "trace", false, "trace every enqueue and attempt with the OpenTelemetry SDK (batched, into an exporter that drops the spans), to measure what tracing costs")
	so := &o.soak
	fs.DurationVar(&so.Duration, "soak", 0, "instead of the measurements, run a producer and a pool of no-op handlers for this long (e.g. 5m), follow Redis's used_memory and report its CPU per job (INFO cpu: only meaningful on a Redis nothing else uses)")
	fs.IntVar(&so.Concurrency, "soak-concurrency", 50, "the soak's pool concurrency")
	fs.IntVar(&so.Backlog, "soak-backlog", 10000, "jobs the soak's producer keeps enqueued and not yet handled")
	fs.DurationVar(&so.Every, "soak-every", 5*time.Second, "how often the soak reads used_memory")
	fs.StringVar(&so.RetentionName, "retention", "default", "the soak pool's retention: default (the pool's defaults) or age-only (done and cancelled jobs kept 24h, dead 7d, no count limit: earlier versions' defaults)")
	fs.IntVar(&o.groups.Groups, "groups", 0, "instead of the measurements, an A/B of a pool of 50 draining --jobs no-op jobs without groups and spread over this many groups (no group limits), alternated --groups-rounds times; prints both medians and their ratio")
	fs.IntVar(&o.groups.Rounds, "groups-rounds", 3, "the A/B rounds of --groups")
	o.groups.Concurrency = 50
	if _, err := parse(fs, benchSynopsis, args, 0, 0); err != nil {
		return nil, err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	switch {
	case given["prefix"]:
		return nil, usagef("bench writes under a prefix of its own (fenceq-bench-<random>), deleted when it ends; drop --prefix")
	case o.redis.cluster != "":
		return nil, usagef("bench measures one Redis server, not a cluster; give one node with --redis")
	case o.jobs < 1:
		return nil, usagef("--jobs %d: must be at least 1", o.jobs)
	}
	if err := checkSoakFlags(given, so); err != nil {
		return nil, err
	}
	if err := checkGroupsFlags(given, &o.groups); err != nil {
		return nil, err
	}
	return o, nil
}

// checkGroupsFlags refuses --groups values that cannot run and
// --groups-rounds without --groups.
func checkGroupsFlags(given map[string]bool, g *bench.GroupsOptions) error {
	switch {
	case given["groups-rounds"] && !given["groups"]:
		return usagef("--groups-rounds applies to --groups: give --groups N too")
	case !given["groups"]:
		return nil
	case given["soak"]:
		return usagef("--groups and --soak each replace the measurements: give one of them")
	case g.Groups < 1:
		return usagef("--groups %d: must be at least 1", g.Groups)
	case g.Rounds < 1:
		return usagef("--groups-rounds %d: must be at least 1", g.Rounds)
	}
	return nil
}

// connect connects under a new random prefix, bench's own, and says so.
func (o *benchFlags) connect(ctx context.Context, e *env) (redis.UniversalClient, error) {
	if o.flush {
		fmt.Fprintln(e.stderr, "bench: --flush is ignored: bench deletes only its own keys and never flushes a database")
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:]) // crypto/rand never fails on Linux; a zero tag is still a prefix of bench's own
	o.redis.prefix = "fenceq-bench-" + hex.EncodeToString(tag[:])
	rdb, _, err := o.redis.connect(ctx, e)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(e.stderr, "bench: writing only keys under %s:, deleted when it ends\n", o.redis.prefix)
	return rdb, nil
}

// print writes r as one JSON object with --json, else as a table.
func (o *benchFlags) print(e *env, r any) error {
	if o.asJSON {
		return printJSON(e.stdout, r)
	}
	bench.PrintTable(e.stdout, r)
	return nil
}

// checkSoakFlags refuses soak flags without --soak and values that cannot
// run, and resolves --retention.
func checkSoakFlags(given map[string]bool, so *bench.SoakOptions) error {
	if !given["soak"] {
		for _, f := range []string{"soak-concurrency", "soak-backlog", "soak-every", "retention"} {
			if given[f] {
				return usagef("--%s applies to a soak: give --soak DURATION too", f)
			}
		}
		return nil
	}
	var err error
	switch {
	case given["jobs"]:
		return usagef("--jobs sizes the measurements that --soak replaces: drop one of them")
	case so.Duration <= 0:
		return usagef("--soak %s: must be positive, e.g. 5m", so.Duration)
	case so.Concurrency < 1:
		return usagef("--soak-concurrency %d: must be at least 1", so.Concurrency)
	case so.Backlog < 1:
		return usagef("--soak-backlog %d: must be at least 1", so.Backlog)
	case so.Every <= 0 || so.Every > so.Duration/4:
		return usagef("--soak-every %s: must be positive and at most a quarter of --soak %s, so that its second half has two samples to fit a slope to", so.Every, so.Duration)
	}
	so.Retention, err = soakRetention(so.RetentionName)
	return err
}

// soakRetention is the retention a soak's pool runs with, by name.
// "default" leaves Config.Retention nil, so that a soak measures whatever
// the pool's defaults are in this build; "age-only" spells out an
// age-only retention (done and cancelled jobs kept a day, dead ones a
// week, no count limit, as earlier versions' defaults were), so that a
// comparison across versions keeps its meaning whatever the defaults are.
func soakRetention(name string) (*broker.Retention, error) {
	switch name {
	case "default":
		return nil, nil
	case "age-only":
		return &broker.Retention{Done: 24 * time.Hour, Cancelled: 24 * time.Hour, Dead: 7 * 24 * time.Hour,
			MaxDone: worker.KeepForever, MaxCancelled: worker.KeepForever, MaxDead: worker.KeepForever}, nil
	}
	return nil, usagef("--retention %q: want default (the pool's defaults) or age-only (done and cancelled jobs kept 24h, dead 7d, no count limit: earlier versions' defaults)", name)
}
