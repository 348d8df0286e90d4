package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unicode"
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

// queueKeyNames are a queue's fixed keys (lib.lua reads them by name,
// K.ready0, from the table scriptKeys writes, which builds each from the
// queue's base when a call first uses it; a script's one KEY is the first,
// so that Redis Cluster routes it to the queue's slot):
//
//	ready0     LIST    pending jobs of priority 0, pushed at the head, claimed
//	                   from the tail; a pending job cancelled leaves its entry
//	                   (a tombstone, counted in limits' "tombs") for the claim
//	                   to skip
//	scheduled  ZSET    delayed jobs and retries in backoff; score = run_at
//	leases     ZSET    running jobs; score = lease_until (the reaper reads this)
//	dead       ZSET    dead jobs; score = finished_at
//	done       ZSET    done jobs; score = finished_at
//	cancelled  ZSET    cancelled jobs; score = finished_at
//	wake       LIST    at most one wake-up token for workers blocked in BLPOP
//	seq        STRING  the FIFO sequence of ready_hi and ready_lo
//	paused     STRING  present while the queue is paused (nothing is claimed)
//	limits     HASH    the queue's settings, shared by every pool: max_running,
//	                   rate, period_ms, events (the stream's length when on);
//	                   and the ready index's flags: tombs (ready0's
//	                   tombstones), hi and lo (ready_hi, ready_lo may hold
//	                   jobs), legacy (the ready ZSET of earlier versions
//	                   may hold jobs);
//	                   flags that let a claim skip what is not in use:
//	                   paused ("1"/"0", with the paused key), sched_min (a
//	                   lower bound on scheduled's scores, "none" when it is
//	                   empty), cascade ("1" while the cascade list may hold
//	                   entries, "0" once empty) and recheck_at (when a claim
//	                   next reads all three anyway). Absent means look; see
//	                   lib.lua's set_flag
//	starts     ZSET    recent starts, for the rate limit; score = claim time
//	events     STREAM  lifecycle events, when enabled
//	blocked    ZSET    jobs waiting for the jobs they depend on; score = created_at
//	gen        STRING  the queue's generation counter (invariants 3 and 10)
//	cascade    LIST    finished jobs whose dependents are still to be settled
//	stats      HASH    settlements per minute of Redis time: "<minute>:d" jobs
//	                   done, "<minute>:f" failed attempts, and "head", the
//	                   newest minute counted (lib.lua's count_settled)
//	ready_hi   ZSET    pending jobs of priority above 0; score = priority band
//	                   + FIFO sequence
//	ready_lo   ZSET    pending jobs of priority below 0, scored the same way
//	grotation  ZSET    groups that may start a job now, in turn order; score =
//	                   a ticket from seq (lowest next). Member "" is the turn
//	                   of the ungrouped jobs while the queue uses groups
//	gwait      ZSET    the groups' timer: groups with pending jobs that may not
//	                   start now (full, cooling down for their rate, holding
//	                   for an ordered retry); score = when to look again
//	grunning   HASH    group → its number of valid leases (invariant 11);
//	                   a field goes when its count reaches 0
//	glimits    HASH    per-group overrides of the group limits: group →
//	                   "<max_running> <rate> <period_ms> <ordered>", each "-"
//	                   for the queue's default, "0" for none
//	ghold      HASH    ordered groups: group → the id that must run next (a
//	                   job of the group sent back to wait or retry)
//
// The settings hash (limits) also holds the groups' fields: groups ("1"
// while the queue may have grouped jobs pending or running; absent, a
// claim runs the ungrouped path and reads none of the above), g_pending
// (the number of pending grouped jobs, for the counts), g_max_running,
// g_rate, g_period_ms and g_ordered (the defaults for every group),
// g_overrides ("1" while glimits has fields) and gwait_min (a lower bound
// on gwait's scores, "none" when it is empty; as sched_min).
//
// The pending jobs are claimed from ready_hi, then ready0, then ready_lo.
// legacyReady is not one of them: the single ZSET that held every pending
// job before ready0 existed, which a claim drains into the three while
// limits' "legacy" flag says it may hold jobs (the reaper sets it).
var queueKeyNames = []string{"ready0", "scheduled", "leases", "dead", "done", "cancelled", "wake", "seq",
	"paused", "limits", "starts", "events", "blocked", "gen", "cascade", "stats", "ready_hi", "ready_lo",
	"grotation", "gwait", "grunning", "glimits", "ghold"}

// legacyReady is the name of the ready ZSET of earlier fenceq versions
// (score = priority band + sequence, every priority in one set).
const legacyReady = "ready"

// pendingKeys are the keys that hold pending jobs, in claim order.
var pendingKeys = []string{"ready_hi", "ready0", "ready_lo"}

// derivedKinds are the kinds of key that belong to one job (or request) of
// a queue, "<base><kind>:<id>":
//
//	job       HASH    the job itself
//	children  SET     "<incarnation>:<child id>" of the jobs that wait for the job
//	cascade   SET     the same, taken from a finished job, being settled (id: a
//	                  number from gen)
//	finished  LIST    a wake-up for Client.Wait callers of the job; expires
//	                  lib.lua's WAIT_KEEP_MS after it finished
//	final     HASH    a waited-on job trimmed before its callers read it: its
//	                  hash, renamed by trim.lua; expires at its 'wait_until'
//	                  (id: "<n>:<job id>", n from 1 to lib.lua's
//	                  WAIT_KEEP_RECORDS, one per job under the id)
//	waiter    LIST    ends one Client.Wait call's blocking pop when its context
//	                  is cancelled (id: a nonce of the call); expires in 10 s
//	claim     STRING  the ids one claim request took, for its re-send (id: the
//	                  request id)
//	unique    STRING  the id of the job holding a unique key (id: Job.UniqueKey)
//	gready    ZSET    a group's pending jobs (id: the group); score = priority
//	                  band + FIFO sequence, as ready_hi. Empty, Redis deletes it
//	grate     STRING  present while a rate-limited group cools down after a
//	                  start (id: the group); value = that start's Redis ms;
//	                  expires at the spacing, ceil(period/rate)
//	deleted   STRING  the state a Delete found the job in, for that
//	                  request's re-send (id: the request nonce;
//	                  delete.lua); expires after ResendHorizon
//	purged    STRING  one Purge step's reply, JSON, for its re-send (id: the
//	                  step's request nonce); expires after ResendHorizon
//	promoted  STRING  the id of the job a Promote ran early, for that
//	                  request's re-send (id: the request nonce;
//	                  promote.lua); expires after ResendHorizon
//	retrysent HASH    job id → "<state before> <new state>" of each job one
//	                  Retry call sent back, for that request's re-send (id:
//	                  the request nonce; retry.lua); expires after
//	                  ResendHorizon
const (
	kindJob       = "job"
	kindChildren  = "children"
	kindCascade   = "cascade"
	kindFinished  = "finished"
	kindFinal     = "final"
	kindWaiter    = "waiter"
	kindClaim     = "claim"
	kindUnique    = "unique"
	kindGReady    = "gready"
	kindGRate     = "grate"
	kindDeleted   = "deleted"
	kindPurged    = "purged"
	kindPromoted  = "promoted"
	kindRetrySent = "retrysent"
)

var derivedKinds = []string{kindJob, kindChildren, kindCascade, kindFinished, kindFinal, kindWaiter, kindClaim, kindUnique, kindGReady, kindGRate, kindDeleted, kindPurged, kindPromoted, kindRetrySent}

// derivedSep separates a derived key's kind from its id.
const derivedSep = ":"

// stateIndex names the index that holds a job in each state (invariant 6).
// A pending job is in one of pendingKeys; pendingIndex is the one Lua's
// INDEX names for it (lib.lua's ready_index says which holds a given job).
var stateIndex = map[State]string{
	StateBlocked: "blocked", StateScheduled: "scheduled", StateRunning: "leases",
	StateDone: "done", StateDead: "dead", StateCancelled: "cancelled",
}

const pendingIndex = "ready0"

// scriptKeys is the Lua that every script runs first: the names above as
// lib.lua uses them. begin_keys(base) starts a call of a script for the
// queue whose base is base (ARGV[1]): BASE is that base; JOB the prefix of
// its job hashes; K maps each of queueKeyNames to its key, built from BASE
// on a call's first use (a name not in the list is an error, not nil);
// LEGACY_READY is legacyReady's key; INDEX[state] is the key of the index
// that holds a job in that state (stateIndex, pendingIndex), nil for an
// unknown state; and derived(kind, id) is the key of one job's structure.
// None of them survives from one call to the next: a FUNCTION library
// keeps its upvalues between calls (scripts.go), so begin_keys sets every
// one.
func scriptKeys() string {
	var s strings.Builder
	s.WriteString("-- keys, written by broker/keys.go\nlocal BASE, JOB, K, LEGACY_READY, INDEX\nlocal KEY_NAMES = {")
	for _, name := range queueKeyNames {
		fmt.Fprintf(&s, "%s = true, ", name)
	}
	fmt.Fprintf(&s, "}\nlocal INDEX_NAME = {%s = '%s', ", StatePending, pendingIndex)
	for _, st := range States {
		if name := stateIndex[st]; name != "" {
			fmt.Fprintf(&s, "%s = '%s', ", st, name)
		}
	}
	s.WriteString(`}
local K_META = {__index = function(t, name)
  if not KEY_NAMES[name] then
    error('fenceq: no queue key named ' .. tostring(name))
  end
  local key = BASE .. name
  t[name] = key
  return key
end}
local INDEX_META = {__index = function(_, state)
  local name = INDEX_NAME[state]
  return name and K[name]
end}
local function begin_keys(base)
  BASE = base
`)
	fmt.Fprintf(&s, "  JOB = base .. '%s%s'\n", kindJob, derivedSep)
	fmt.Fprintf(&s, "  LEGACY_READY = base .. '%s'\n", legacyReady)
	s.WriteString("  K = setmetatable({}, K_META)\n  INDEX = setmetatable({}, INDEX_META)\nend\n")
	fmt.Fprintf(&s, "local function derived(kind, id)\n  return BASE .. kind .. '%s' .. id\nend\n", derivedSep)
	return s.String()
}

// queueKeys are the key names of one queue, built once per queue and kept
// in the broker's keyCache.
type queueKeys struct {
	name       string
	base       string      // "<prefix>:{<queue>}:", every script's ARGV[1]
	job        string      // job hash prefix: job key = job + id
	list       []string    // queueKeyNames' keys, in order; a script's one KEY is the first
	baseArg    any         // base as a command argument, boxed once per queue
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

func (b *core) queueKeys(queue string) *queueKeys {
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

func (b *core) newQueueKeys(queue string) *queueKeys {
	base := b.opts.Prefix + ":{" + queue + "}:"
	k := &queueKeys{name: queue, base: base}
	k.job = k.derived(kindJob, "")
	for _, name := range queueKeyNames {
		k.list = append(k.list, base+name)
	}
	k.baseArg = base
	return k
}

// The queue's keys, one method per name of queueKeyNames (keys_internal_test
// checks that each builds its name's key), and legacy for legacyReady.
func (k *queueKeys) ready0() string    { return k.base + "ready0" }
func (k *queueKeys) scheduled() string { return k.base + "scheduled" }
func (k *queueKeys) leases() string    { return k.base + "leases" }
func (k *queueKeys) dead() string      { return k.base + "dead" }
func (k *queueKeys) done() string      { return k.base + "done" }
func (k *queueKeys) cancelled() string { return k.base + "cancelled" }
func (k *queueKeys) wake() string      { return k.base + "wake" }
func (k *queueKeys) seq() string       { return k.base + "seq" }
func (k *queueKeys) paused() string    { return k.base + "paused" }
func (k *queueKeys) limits() string    { return k.base + "limits" }
func (k *queueKeys) starts() string    { return k.base + "starts" }
func (k *queueKeys) events() string    { return k.base + "events" }
func (k *queueKeys) blocked() string   { return k.base + "blocked" }
func (k *queueKeys) gen() string       { return k.base + "gen" }
func (k *queueKeys) cascade() string   { return k.base + "cascade" }
func (k *queueKeys) stats() string     { return k.base + "stats" }
func (k *queueKeys) readyHi() string   { return k.base + "ready_hi" }
func (k *queueKeys) readyLo() string   { return k.base + "ready_lo" }
func (k *queueKeys) grotation() string { return k.base + "grotation" }
func (k *queueKeys) gwait() string     { return k.base + "gwait" }
func (k *queueKeys) grunning() string  { return k.base + "grunning" }
func (k *queueKeys) glimits() string   { return k.base + "glimits" }
func (k *queueKeys) ghold() string     { return k.base + "ghold" }
func (k *queueKeys) legacy() string    { return k.base + legacyReady }

// key is one of the queue's keys by its name in queueKeyNames, for the
// code that walks a list of names (pendingKeys, stateIndex).
func (k *queueKeys) key(name string) string { return k.base + name }

// derived is the key of kind (one of derivedKinds) for id, as lib.lua's
// derived builds it.
func (k *queueKeys) derived(kind, id string) string { return k.base + kind + derivedSep + id }

// index is the key of the sorted set that holds jobs in state s; "" for
// StatePending, whose jobs are in pendingKeys (and perhaps legacyReady).
func (k *queueKeys) index(s State) string {
	name := stateIndex[s]
	if name == "" {
		return ""
	}
	return k.key(name)
}

func (b *core) queuesKey() string { return b.opts.Prefix + ":queues" }

// The schedules stored in Redis (schedules.go), outside every queue's
// slot and all under one hash tag, so that a change is one MULTI even on
// Redis Cluster:
//
//	defs     HASH    name → a stored schedule (JSON: timing, job, catch-up,
//	                 paused, revision, since)
//	version  STRING  bumped by every change of defs; pools poll it
//	runs     ZSET    name → its newest fired tick (Unix seconds); the job
//	                 id is TickID's
//	config   HASH    name → a pool's config schedule, as it published it
func (b *core) schedDefsKey() string    { return b.opts.Prefix + ":{schedules}:defs" }
func (b *core) schedVersionKey() string { return b.opts.Prefix + ":{schedules}:version" }
func (b *core) schedRunsKey() string    { return b.opts.Prefix + ":{schedules}:runs" }
func (b *core) schedConfigKey() string  { return b.opts.Prefix + ":{schedules}:config" }

// sessionKey is a signed-in dashboard session's key (session.go), outside
// every queue's slot: a STRING that expires with the session.
func (b *core) sessionKey(id string) string { return b.opts.Prefix + ":session:" + id }

// QueueExists answers whether a broker with this prefix has enqueued to
// queue (whether Queues lists it), in one SISMEMBER whatever their number.
func (b *Inspector) QueueExists(ctx context.Context, queue string) (bool, error) {
	if err := validName("queue", queue); err != nil {
		return false, err
	}
	ok, err := b.rdb.SIsMember(ctx, b.queuesKey(), queue).Result()
	if err != nil {
		return false, fmt.Errorf("fenceq: look up queue %q: %w", queue, err)
	}
	return ok, nil
}

// QueueNameRule says what a queue name may be; every refusal of a name
// by ValidateQueue ends with it.
const QueueNameRule = "a queue name is up to 200 bytes of UTF-8 without white space, control characters, '{' or '}' (which delimit the Redis Cluster hash tag), like mail or reports.daily"

// ValidateQueue answers a *ValidationError when queue is no name for a new
// queue: the one rule (QueueNameRule) that Enqueue, a worker's constructor
// and workerd's config and commands apply. White space ("a b" is almost
// always the list [a, b] mistyped) and the C1 control characters are
// refused here; the operations that read or change an existing queue only
// refuse a name no key can be built from, so a queue named before this
// rule can still be read and drained.
func ValidateQueue(queue string) error {
	err := validName("queue", queue)
	var ve *ValidationError
	switch {
	case errors.As(err, &ve):
		ve.Reason += "; " + QueueNameRule
		return ve
	case strings.ContainsFunc(queue, unicode.IsSpace):
		return &ValidationError{Field: "queue", Value: short(queue), Reason: "must not contain white space; " + QueueNameRule}
	case strings.ContainsFunc(queue, unicode.IsControl):
		return &ValidationError{Field: "queue", Value: short(queue), Reason: "must not contain control characters; " + QueueNameRule}
	}
	return nil
}

// ValidateKind answers the *ValidationError Enqueue would for a job of
// kind: for a worker to refuse a bad handler kind before it runs.
func ValidateKind(kind string) error { return validName("kind", kind) }

// register adds the queue to the queues set, once per broker and queue. The
// set lives outside every queue's slot, so it cannot be written by a script.
func (b *core) register(ctx context.Context, k *queueKeys) error {
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
