package broker

import (
	"cmp"
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

const (
	// PrefixDefault is the key prefix when Options.Prefix is empty.
	PrefixDefault = "fenceq"
	// MaxPayloadBytesDefault is the payload limit when Options.MaxPayloadBytes is 0.
	MaxPayloadBytesDefault = 1 << 20
	// MaxAttemptsDefault is a job's attempt budget when Job.MaxAttempts is 0.
	MaxAttemptsDefault = 25
	// PriorityMin and PriorityMax bound Job.Priority; higher is claimed first.
	PriorityMin, PriorityMax = -100, 100
	// MaxDependsOn bounds Job.DependsOn: enqueue and retry read each
	// dependency in one script, which must stay short (invariant 8).
	MaxDependsOn = 1000

	// promoteLimit bounds how many due scheduled jobs one Claim moves to ready.
	promoteLimit = 1000
	// cascadeBudget bounds how many dependents of finished jobs one Claim
	// settles (released or cancelled): invariant 8's step, as the settling
	// scripts' own (CASCADE_INLINE in lib.lua). Each costs 20–90 µs of
	// Redis time (TestBoundedCascadesAtScale logs the longest step).
	cascadeBudget = 50
)

// Options configures a Broker. The zero value is ready to use.
type Options struct {
	// Prefix starts every key, so several fenceq deployments (or tests) can
	// share one Redis. Default PrefixDefault. It must not contain '{' or '}'.
	Prefix string
	// MaxPayloadBytes is the largest payload Enqueue accepts. Default
	// MaxPayloadBytesDefault (1 MiB); -1 means no limit beyond Redis's own.
	MaxPayloadBytes int
	// WaitReplicas, when above 0, makes Enqueue and EnqueueMany durable
	// against a failover: after the script, on the same connection, the
	// broker sends WAIT and returns an error wrapping ErrNotReplicated when
	// fewer replicas acknowledged the write within WaitTimeout. Default 0
	// (off: an acknowledged enqueue may be lost if its primary fails before
	// replicating it). WaitTimeout defaults to 1s and must stay below the
	// client's ReadTimeout, since WAIT blocks that long.
	WaitReplicas int
	WaitTimeout  time.Duration // how long WAIT waits; default 1s when WaitReplicas > 0
	// TracerProvider, when set, traces every job: Enqueue and EnqueueMany
	// start a producer span per job and carry its context in the job's
	// Metadata (traceparent, tracestate: W3C trace context, whatever the
	// global propagator), and a worker.Pool on this broker starts a
	// consumer span per attempt in the same trace. Default nil (a nil
	// *sdktrace.TracerProvider too): no spans, no trace context written,
	// nothing spent but a nil check. The global
	// provider is not used unless passed: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
}

func (o Options) withDefaults() Options {
	o.Prefix = cmp.Or(o.Prefix, PrefixDefault)
	o.MaxPayloadBytes = cmp.Or(o.MaxPayloadBytes, MaxPayloadBytesDefault)
	if o.WaitReplicas > 0 {
		o.WaitTimeout = cmp.Or(o.WaitTimeout, time.Second)
	}
	if isNilPointer(o.TracerProvider) {
		// A program that builds its provider only when tracing is
		// configured passes a nil *sdktrace.TracerProvider: no tracing, as
		// an unset field (the SDK's methods crash on a nil receiver).
		o.TracerProvider = nil
	}
	return o
}

// isNilPointer reports whether v holds a nil pointer (a typed nil in an
// interface, which compares unequal to nil).
func isNilPointer(v any) bool {
	r := reflect.ValueOf(v)
	return r.Kind() == reflect.Pointer && r.IsNil()
}

func (o Options) validate() error {
	if strings.ContainsAny(o.Prefix, "{}") {
		return &ValidationError{Field: "prefix", Value: o.Prefix, Reason: "must not contain '{' or '}', which delimit the Redis Cluster hash tag"}
	}
	if o.MaxPayloadBytes < -1 {
		return &ValidationError{Field: "MaxPayloadBytes", Value: fmt.Sprint(o.MaxPayloadBytes), Reason: "must be positive, 0 for the default, or -1 for no limit"}
	}
	if o.WaitReplicas < 0 || o.WaitTimeout < 0 {
		return &ValidationError{Field: "WaitReplicas", Value: fmt.Sprint(o.WaitReplicas, " ", o.WaitTimeout), Reason: "WaitReplicas and WaitTimeout must not be negative"}
	}
	return nil
}

// Broker is one connection to one Redis deployment: a single node,
// Sentinel or Cluster, through go-redis's UniversalClient. It holds the
// connection-level calls; the operations are on views that share its
// state: Client for producers, Inspector for operators and dashboards,
// Leases for the lease protocol a worker uses, and Schedules for the
// periodic jobs stored in Redis. It is safe for concurrent use and holds no
// goroutines.
type Broker struct {
	*core
	client    *Client
	inspector *Inspector
	leases    *Leases
}

// core is the state a Broker and its views share.
type core struct {
	rdb     redis.UniversalClient
	opts    Options
	keys    keyCache // the key names of the queues in use (keys.go)
	scripts *scripts
	fnOff   atomic.Bool  // FUNCTION missing or refused: EVALSHA (functions.go)
	tracer  trace.Tracer // nil: not tracing
}

// New returns a Broker over rdb. It does not contact Redis.
func New(rdb redis.UniversalClient, opts Options) (*Broker, error) {
	opts = opts.withDefaults()
	if err := opts.validate(); err != nil {
		return nil, err
	}
	sc, err := loadScripts()
	if err != nil {
		return nil, err
	}
	c := &core{rdb: rdb, opts: opts, scripts: sc}
	if opts.TracerProvider != nil {
		c.tracer = opts.TracerProvider.Tracer(TracerScope)
	}
	return &Broker{core: c, client: &Client{c}, inspector: &Inspector{c}, leases: &Leases{c}}, nil
}

// Client is the producers' view: enqueue a job, wait for its end.
func (b *Broker) Client() *Client { return b.client }

// Inspector is the operators' view: read and change queues and jobs.
func (b *Broker) Inspector() *Inspector { return b.inspector }

// Leases is the lease protocol a worker uses.
func (b *Broker) Leases() *Leases { return b.leases }

// TracerProvider is Options.TracerProvider: nil when the broker does not
// trace. A worker.Pool traces its attempts with it.
func (b *Broker) TracerProvider() trace.TracerProvider { return b.opts.TracerProvider }

// Prefix is the key prefix in use.
func (b *Broker) Prefix() string { return b.opts.Prefix }

// PoolSize is the go-redis PoolSize of the connection (per node on a
// Cluster): the most commands it has in flight at once. 0 when the client
// does not say (a Ring, or a wrapper).
func (b *Broker) PoolSize() int {
	switch c := b.rdb.(type) {
	case *redis.Client:
		return c.Options().PoolSize
	case *redis.ClusterClient:
		return c.Options().PoolSize
	}
	return 0
}

// run executes one script for one queue (runScript): its one KEY is the
// queue's first, for the routing; the script builds the others from the
// queue's key prefix, ARGV[1].
func (b *core) run(ctx context.Context, s *script, k *queueKeys, args ...any) *redis.Cmd {
	return b.runScript(ctx, s, k.list[:1], withJobPrefix(k, args))
}

// withJobPrefix puts the queue's key prefix first: every script's ARGV[1].
func withJobPrefix(k *queueKeys, args []any) []any {
	return append([]any{k.base}, args...)
}
