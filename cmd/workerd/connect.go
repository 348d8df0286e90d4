package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fenceq/fenceq/broker"
)

// redisFlags are the connection flags every command that talks to Redis
// takes.
type redisFlags struct {
	url, sentinelMaster, sentinels, cluster, prefix string
	// tracing, when set (run and enqueue, from the OTEL_* variables), is
	// the broker's tracer provider.
	tracing *sdktrace.TracerProvider
}

func (r *redisFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&r.url, "redis", "", "Redis address: host:port, or a URL redis://[user:password@]host:port[/db], rediss:// for TLS (default $REDIS_URL, else 127.0.0.1:6379)")
	fs.StringVar(&r.sentinelMaster, "sentinel-master", "", "Sentinel master name (with --sentinel)")
	fs.StringVar(&r.sentinels, "sentinel", "", "comma-separated Sentinel addresses host:port")
	fs.StringVar(&r.cluster, "cluster", "", "comma-separated Redis Cluster node addresses host:port")
	fs.StringVar(&r.prefix, "prefix", broker.PrefixDefault, "key prefix of the fenceq deployment")
}

// connect builds the client the flags describe and checks that it answers.
// Credentials, TLS and db of --redis (or REDIS_URL) also apply to Sentinel
// and Cluster connections.
func (r *redisFlags) connect(ctx context.Context, e *env) (redis.UniversalClient, *broker.Broker, error) {
	raw := cmp.Or(r.url, e.getenv("REDIS_URL"), "redis://127.0.0.1:6379")
	opt, err := redis.ParseURL(redisURL(raw))
	if err != nil {
		// url.Error would quote the URL with the scheme we added.
		if ue := (*url.Error)(nil); errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, nil, &configError{fmt.Errorf("bad Redis address %q: %s; write host:port, redis://[user:password@]host:port[/db], or rediss://... for TLS", raw, strings.TrimPrefix(err.Error(), "redis: "))}
	}
	u := &redis.UniversalOptions{
		Addrs: []string{opt.Addr}, Username: opt.Username, Password: opt.Password, DB: opt.DB, TLSConfig: opt.TLSConfig,
	}
	where := opt.Addr
	switch {
	case r.cluster != "" && r.sentinels != "":
		return nil, nil, usagef("--cluster and --sentinel exclude each other")
	case r.cluster != "":
		u.Addrs, u.IsClusterMode, where = split(r.cluster), true, "cluster "+r.cluster
	case r.sentinels != "" || r.sentinelMaster != "":
		if r.sentinels == "" || r.sentinelMaster == "" {
			return nil, nil, usagef("--sentinel and --sentinel-master go together")
		}
		u.Addrs, u.MasterName, where = split(r.sentinels), r.sentinelMaster, "sentinel master "+r.sentinelMaster
	}
	if u.TLSConfig != nil && u.TLSConfig.MinVersion == 0 {
		u.TLSConfig.MinVersion = tls.VersionTLS12
	}
	c := redis.NewUniversalClient(u)
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		_ = c.Close()
		return nil, nil, &configError{fmt.Errorf("cannot reach Redis at %s: %v; check that it runs and that --redis (or REDIS_URL) is right", where, err)}
	}
	opts := broker.Options{Prefix: r.prefix}
	if r.tracing != nil { // a nil *TracerProvider in the interface would not read as nil
		opts.TracerProvider = r.tracing
	}
	b, err := broker.New(c, opts)
	if err != nil {
		_ = c.Close()
		return nil, nil, &configError{err}
	}
	return c, b, nil
}

// redisURL reads an address without a scheme, host:port, as
// redis://host:port: what redis-cli users type.
func redisURL(raw string) string {
	if strings.Contains(raw, "://") {
		return raw
	}
	return "redis://" + raw
}

func split(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
