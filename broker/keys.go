package broker

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

const (
	maxNameBytes = 200  // queue and kind names
	maxIDBytes   = 1024 // job ids
)

// This file is the one definition of fenceq's key names, for Go and Lua
// alike: a queue's keys are "<prefix>:{<queue>}:" (its base, whose hash tag
// puts them all in one Redis Cluster slot) followed by a name of
// queueKeyNames, or by a kind of derivedKinds, ':' and an id. The scripts
// get the same names from scriptKeys, which writes the Lua that defines
// them; no script builds a key any other way.

// queueKeyNames are a queue's fixed keys, in the order of every script's
// KEYS (lib.lua reads them by name, K.ready, from the table scriptKeys
// writes):
//
//	ready      ZSET    pending jobs; score = priority band + FIFO sequence
//	scheduled  ZSET    delayed jobs and retries in backoff; score = run_at
//	leases     ZSET    running jobs; score = lease_until (the reaper reads this)
//	dead       ZSET    dead jobs; score = finished_at
//	done       ZSET    done jobs; score = finished_at
//	cancelled  ZSET    cancelled jobs; score = finished_at
//	wake       LIST    at most one wake-up token for workers blocked in BLPOP
//	seq        STRING  the ready index's FIFO sequence
//	paused     STRING  present while the queue is paused (nothing is claimed)
//	limits     HASH    the queue's settings, shared by every pool: max_running,
//	                   rate, period_ms, events (the stream's length when on)
//	starts     ZSET    recent starts, for the rate limit; score = claim time
//	events     STREAM  lifecycle events, when enabled
//	blocked    ZSET    jobs waiting for the jobs they depend on; score = created_at
//	gen        STRING  the queue's generation counter (invariants 3 and 10)
//	cascade    LIST    finished jobs whose dependents are still to be settled
//	stats      HASH    settlements per minute of Redis time: "<minute>:d" jobs
//	                   done, "<minute>:f" failed attempts, and "head", the
//	                   newest minute counted (lib.lua's count_settled)
var queueKeyNames = []string{"ready", "scheduled", "leases", "dead", "done", "cancelled", "wake", "seq",
	"paused", "limits", "starts", "events", "blocked", "gen", "cascade", "stats"}

// derivedKinds are the kinds of key that belong to one job (or request) of
// a queue, "<base><kind>:<id>":
//
//	job       HASH    the job itself
//	children  SET     "<incarnation>:<child id>" of the jobs that wait for the job
//	cascade   SET     the same, taken from a finished job, being settled (id: a
//	                  number from gen)
//	finished  LIST    a wake-up for Broker.Wait callers of the job; expires
//	                  lib.lua's WAIT_KEEP_MS after it finished
//	final     HASH    a waited-on job trimmed before its callers read it: its
//	                  hash, renamed by trim.lua; expires at its 'wait_until'
//	                  (id: "<n>:<job id>", n from 1 to lib.lua's
//	                  WAIT_KEEP_RECORDS, one per job under the id)
//	waiter    LIST    ends one Broker.Wait call's blocking pop when its context
//	                  is cancelled (id: a nonce of the call); expires in 10 s
//	claim     STRING  the ids one claim request took, for its re-send (id: the
//	                  request id)
//	unique    STRING  the id of the job holding a unique key (id: Job.UniqueKey)
const (
	kindJob      = "job"
	kindChildren = "children"
	kindCascade  = "cascade"
	kindFinished = "finished"
	kindFinal    = "final"
	kindWaiter   = "waiter"
	kindClaim    = "claim"
	kindUnique   = "unique"
)

var derivedKinds = []string{kindJob, kindChildren, kindCascade, kindFinished, kindFinal, kindWaiter, kindClaim, kindUnique}

// derivedSep separates a derived key's kind from its id.
const derivedSep = ":"

// scriptKeys is the Lua that every script runs first: the names above as
// lib.lua uses them. K maps each of queueKeyNames to its KEYS entry; BASE
// is the queue's base, ARGV[1]; JOB the prefix of its job hashes; and
// derived(kind, id) the key of one job's structure.
func scriptKeys() string {
	var s strings.Builder
	s.WriteString("-- keys, written by broker/keys.go\nlocal K = {")
	for i, name := range queueKeyNames {
		fmt.Fprintf(&s, "%s = KEYS[%d], ", name, i+1)
	}
	s.WriteString("}\nlocal BASE = ARGV[1]\n")
	fmt.Fprintf(&s, "local JOB = BASE .. '%s%s'\n", kindJob, derivedSep)
	fmt.Fprintf(&s, "local function derived(kind, id)\n  return BASE .. kind .. '%s' .. id\nend\n", derivedSep)
	return s.String()
}

// queueKeys are the key names of one queue, built once per queue and kept
// in the broker's keyCache.
type queueKeys struct {
	name string
	base string   // "<prefix>:{<queue>}:", every script's ARGV[1]
	job  string   // job hash prefix: job key = job + id
	list []string // KEYS of every script: queueKeyNames, in order
	// keyArgs is an EVALSHA's numkeys then list, and baseArg base, as
	// command arguments: boxed once per queue, not once per key per call
	// (scriptCall.queue).
	keyArgs    []any
	baseArg    any
	registered atomic.Bool // added to the queues set by this broker
}

// queueKeysCached bounds the queues whose key names a broker keeps: at
// most twice this many (a few KB each) are held at once, however many
// distinct names its callers send.
const queueKeysCached = 1024

// keyCache holds the key names of the queues a broker was asked about
// lately, in two generations: names are added to cur; when cur holds
// queueKeysCached queues it becomes old, and a queue found in old moves
// back to cur, the same *queueKeys (registered flag and all). So a queue
// used at least once per queueKeysCached new names keeps its keys, and the
// names of queues asked about once are dropped two generations later.
type keyCache struct {
	cur sync.Map // queue name → *queueKeys; read without the lock
	mu  sync.Mutex
	n   int                   // queues in cur, under mu
	old map[string]*queueKeys // the previous generation, under mu
}

func (b *Broker) queueKeys(queue string) *queueKeys {
	c := &b.keys
	if k, ok := c.cur.Load(queue); ok {
		return k.(*queueKeys)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if k, ok := c.cur.Load(queue); ok {
		return k.(*queueKeys)
	}
	k := c.old[queue]
	if k == nil {
		k = b.newQueueKeys(queue)
	}
	if c.n >= queueKeysCached {
		c.old = make(map[string]*queueKeys, c.n)
		c.cur.Range(func(name, k any) bool {
			c.old[name.(string)] = k.(*queueKeys)
			return true
		})
		c.cur.Clear()
		c.n = 0
	}
	c.cur.Store(queue, k)
	c.n++
	return k
}

func (b *Broker) newQueueKeys(queue string) *queueKeys {
	base := b.opts.Prefix + ":{" + queue + "}:"
	k := &queueKeys{name: queue, base: base}
	k.job = k.derived(kindJob, "")
	for _, name := range queueKeyNames {
		k.list = append(k.list, base+name)
	}
	k.keyArgs = make([]any, 0, 1+len(k.list))
	k.keyArgs = append(k.keyArgs, len(k.list))
	for _, key := range k.list {
		k.keyArgs = append(k.keyArgs, key)
	}
	k.baseArg = base
	return k
}

// key is one of the queue's keys by its name in queueKeyNames ("wake",
// "limits", ...).
func (k *queueKeys) key(name string) string { return k.base + name }

// derived is the key of kind (one of derivedKinds) for id, as lib.lua's
// derived builds it.
func (k *queueKeys) derived(kind, id string) string { return k.base + kind + derivedSep + id }

// index is the key of the index that holds jobs in state s.
func (k *queueKeys) index(s State) string {
	name := map[State]string{
		StateBlocked: "blocked", StateScheduled: "scheduled", StatePending: "ready", StateRunning: "leases",
		StateDone: "done", StateDead: "dead", StateCancelled: "cancelled",
	}[s]
	if name == "" {
		return ""
	}
	return k.key(name)
}

func (b *Broker) queuesKey() string { return b.opts.Prefix + ":queues" }

// sessionKey is a signed-in dashboard session's key (session.go), outside
// every queue's slot: a STRING that expires with the session.
func (b *Broker) sessionKey(id string) string { return b.opts.Prefix + ":session:" + id }

// QueueExists answers whether a broker with this prefix has enqueued to
// queue (whether Queues lists it), in one SISMEMBER whatever their number.
func (b *Broker) QueueExists(ctx context.Context, queue string) (bool, error) {
	if err := validName("queue", queue); err != nil {
		return false, err
	}
	ok, err := b.rdb.SIsMember(ctx, b.queuesKey(), queue).Result()
	if err != nil {
		return false, fmt.Errorf("fenceq: look up queue %q: %w", queue, err)
	}
	return ok, nil
}

// ValidateQueue answers the *ValidationError any operation on queue would:
// for a worker to refuse a bad queue name in its constructor.
func ValidateQueue(queue string) error { return validName("queue", queue) }

// register adds the queue to the queues set, once per broker and queue. The
// set lives outside every queue's slot, so it cannot be written by a script.
func (b *Broker) register(ctx context.Context, k *queueKeys) error {
	if k.registered.Load() {
		return nil
	}
	if err := b.sadd(ctx, b.queuesKey(), k.name); err != nil {
		return fmt.Errorf("fenceq: register queue %q: %w", k.name, err)
	}
	k.registered.Store(true) // a lost race only repeats an idempotent SADD
	return nil
}

func validName(field, v string) error {
	switch {
	case v == "":
		return &ValidationError{Field: field, Reason: "must not be empty"}
	case len(v) > maxNameBytes:
		return &ValidationError{Field: field, Value: short(v), Reason: fmt.Sprintf("is %d bytes; at most %d are allowed", len(v), maxNameBytes)}
	case !utf8.ValidString(v):
		return &ValidationError{Field: field, Value: short(v), Reason: "is not valid UTF-8"}
	case field == "queue" && strings.ContainsAny(v, "{}"):
		return &ValidationError{Field: field, Value: v, Reason: "must not contain '{' or '}', which delimit the Redis Cluster hash tag"}
	case strings.ContainsFunc(v, isControl):
		return &ValidationError{Field: field, Value: short(v), Reason: "must not contain control characters"}
	}
	return nil
}

func validID(queue, id string) error {
	if err := validName("queue", queue); err != nil {
		return err
	}
	switch {
	case id == "":
		return &ValidationError{Field: "id", Reason: "must not be empty"}
	case len(id) > maxIDBytes:
		return &ValidationError{Field: "id", Value: short(id), Reason: fmt.Sprintf("is %d bytes; at most %d are allowed", len(id), maxIDBytes)}
	case !utf8.ValidString(id):
		return &ValidationError{Field: "id", Value: short(id), Reason: "is not valid UTF-8"}
	case strings.ContainsFunc(id, isControl):
		return &ValidationError{Field: "id", Value: short(id), Reason: "must not contain control characters"}
	}
	return nil
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

func short(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:61] + "..."
}
