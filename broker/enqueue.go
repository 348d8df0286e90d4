package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"
)

// Job is what Enqueue takes. Its JSON form (MarshalJSON, UnmarshalJSON) is
// the one way a job is written outside Go: the outbox stores it, and
// workerd reads it from --jsonl lines and periodic jobs. A field added here
// is added to that form too (jobcodec.go); its test fails until it is.
//
// Queue, ID, Kind, Payload, MaxAttempts, Metadata and Group are the fields of
// jobrow.Row that every claim hands back (Lease, handlers.Job); a claim
// adds Attempt and Generation. Job names them alike rather than embedding
// the Row, which an enqueue could not fill.
type Job struct {
	Queue   string // required; no '{' or '}'
	Kind    string // required; selects the handler
	Payload []byte // opaque to the broker; at most Options.MaxPayloadBytes

	// ID is optional. A caller-chosen id makes enqueue idempotent: a second
	// enqueue with the same id returns a *DuplicateError and changes nothing.
	// Empty means a new time-ordered UUID.
	ID string
	// Delay runs the job this long after Redis receives it (Redis time).
	Delay time.Duration
	// RunAt runs the job at this wall-clock time instead; set at most one of
	// Delay and RunAt. A time in the past means now.
	RunAt time.Time
	// MaxAttempts is how many times the job may be claimed before it is dead.
	// 0 means MaxAttemptsDefault (25); it must not be negative.
	MaxAttempts int
	// Priority runs from PriorityMin to PriorityMax (-100..100); higher is
	// claimed first, FIFO within one priority. Default 0.
	Priority int
	// UniqueKey, when set, admits one job per key: while it is held, an
	// enqueue with the same key creates nothing and answers a
	// *UniqueHeldError (errors.Is ErrUniqueHeld) naming the holding job. The
	// key is held for UniqueFor, whatever becomes of the job (retention
	// does not shorten it), or, when UniqueFor is 0, until the job is done,
	// dead or cancelled. The holder's UniqueFor decides, not a newcomer's.
	// Keys are per queue.
	UniqueKey string
	UniqueFor time.Duration // how long UniqueKey is held; 0: until the job finishes
	// DependsOn lists jobs of the same queue that must be done before this
	// one runs; until then it is blocked. When one of them ends dead or
	// cancelled, this job is cancelled too, unless RunIfDependencyFails.
	// An id listed twice counts once. Dependents are released (or
	// cancelled) in bounded steps, so a job with a million dependents
	// never blocks Redis for long; the last of them may start a little
	// after the first.
	DependsOn            []string
	RunIfDependencyFails bool // default false: cancelled when a dependency ends dead or cancelled
	// Metadata is small string headers carried with the job: trace
	// context, a request id, a tenant. Nil or empty stores nothing. Keys
	// must be non-empty, keys and values valid UTF-8, and all of them
	// together at most MaxMetadataBytes (traceparent and tracestate are
	// bounded apart: tracing never pushes a job over). Each claim hands it back
	// (Lease.Metadata); retries, releases and reaps keep it.
	Metadata map[string]string
	// Group is the group the job belongs to: a tenant, a customer, an API
	// key. "" (the default) is none, and such a job stores and costs what
	// it would without groups. At most MaxGroupBytes of valid UTF-8, no
	// control characters and no white space at either end (ValidateGroup).
	// Each claim hands it back (Lease.Group); retries, releases and reaps
	// keep it.
	Group string
}

// ValidateJob checks a job as Enqueue would, without writing anything: a
// template (a periodic job's) can be refused at startup.
func (b *Client) ValidateJob(j Job) error { return b.validate(&j) }

func (b *core) validate(j *Job) error {
	if err := ValidateQueue(j.Queue); err != nil {
		return err
	}
	if err := validName("kind", j.Kind); err != nil {
		return err
	}
	if j.ID != "" {
		if err := validID(j.Queue, j.ID); err != nil {
			return err
		}
	}
	if max := b.opts.MaxPayloadBytes; max >= 0 && len(j.Payload) > max {
		return &ValidationError{Field: "payload", Reason: fmt.Sprintf("is %d bytes; the limit is %d (Options.MaxPayloadBytes). Store large data elsewhere and enqueue a reference to it", len(j.Payload), max)}
	}
	if j.Delay < 0 {
		return &ValidationError{Field: "delay", Value: j.Delay.String(), Reason: "must not be negative"}
	}
	if j.Delay > 0 && !j.RunAt.IsZero() {
		return &ValidationError{Field: "delay", Value: j.Delay.String(), Reason: "set Delay or RunAt, not both"}
	}
	if j.UniqueKey != "" {
		if err := validID(j.Queue, j.UniqueKey); err != nil {
			err.(*ValidationError).Field = "unique key"
			return err
		}
	}
	if j.UniqueFor < 0 || j.UniqueFor > 0 && j.UniqueKey == "" {
		return &ValidationError{Field: "unique for", Value: j.UniqueFor.String(), Reason: "must not be negative, and needs a UniqueKey"}
	}
	if len(j.DependsOn) > MaxDependsOn {
		return &ValidationError{Field: "depends on", Value: fmt.Sprintf("%d jobs", len(j.DependsOn)),
			Reason: fmt.Sprintf("at most %d are allowed (a script reads each one). To wait for more, make a few jobs that depend on up to %d each, and depend on those", MaxDependsOn, MaxDependsOn)}
	}
	for _, d := range j.DependsOn {
		if err := validID(j.Queue, d); err != nil {
			err.(*ValidationError).Field = "depends on"
			return err
		}
	}
	if j.MaxAttempts < 0 {
		return &ValidationError{Field: "max attempts", Value: fmt.Sprint(j.MaxAttempts), Reason: "must be at least 1 (0 means the default, 25)"}
	}
	if j.Priority < PriorityMin || j.Priority > PriorityMax {
		return &ValidationError{Field: "priority", Value: fmt.Sprint(j.Priority), Reason: fmt.Sprintf("must be between %d and %d", PriorityMin, PriorityMax)}
	}
	if err := ValidateGroup(j.Group); err != nil {
		return err
	}
	return validMetadata(j.Metadata)
}

// ErrNotReplicated is wrapped by the error of an Enqueue (or of one job of
// EnqueueMany) when Options.WaitReplicas is set and WAIT saw fewer replicas
// acknowledge the write within Options.WaitTimeout; the error says how many
// did. The job IS stored on the primary and will normally run: it may still
// replicate, and it is lost only if the primary fails over before it does.
// So retry with the same job ID (a *DuplicateError then means it was kept),
// never with a new one.
var ErrNotReplicated = errors.New("not acknowledged by enough replicas")

// Enqueue stores a job, pending at once or scheduled for later, and wakes a
// waiting worker. It returns the job's id. With a UniqueKey that another
// job holds, nothing is written: it returns the holder's id and a
// *UniqueHeldError (errors.Is ErrUniqueHeld). A duplicate id returns a
// *DuplicateError (errors.Is ErrJobExists); bad arguments return a
// *ValidationError (errors.Is ErrInvalid) and write nothing. With
// Options.WaitReplicas, an error wrapping ErrNotReplicated says the job was
// stored but not replicated in time.
func (b *Client) Enqueue(ctx context.Context, j Job) (string, error) {
	var span trace.Span
	if b.tracer != nil { // off, tracing costs this check alone
		span = b.traceEnqueue(ctx, &j)
	}
	e := b.enqueue(ctx, j)
	if span != nil {
		endEnqueue(span, e)
	}
	return e.ID, e.Err
}

// enqueue is Enqueue's work, with Enqueue's answer.
func (b *core) enqueue(ctx context.Context, j Job) Enqueued {
	c, err := b.prepare(ctx, &j)
	if err != nil {
		return Enqueued{Err: err}
	}
	b.send(ctx, []*enqueueCall{c})
	return b.answer(c)
}

// enqueueCall is one prepared job: the enqueue script's call, then its
// answer.
type enqueueCall struct {
	*scriptCall
	k      *queueKeys
	id     string
	unique string        // Job.UniqueKey, which a *UniqueHeldError names
	acks   *redis.IntCmd // on the durable path, the WAIT that followed cmd on the same connection
}

// send runs the calls' scripts in one round trip, sending again those
// whose reply was lost (eval), or with Options.WaitReplicas, each followed
// by WAIT (enqueueDurably, which sends no call again that may have run).
func (b *core) send(ctx context.Context, calls []*enqueueCall) {
	switch {
	case b.opts.WaitReplicas > 0:
		b.enqueueDurably(ctx, calls)
		return
	}
	evals := make([]*scriptCall, len(calls))
	for i, c := range calls {
		evals[i] = c.scriptCall
	}
	b.eval(ctx, evals, len(evals) == 1) // a job whose reply was lost is sent again: it is recognised
}

// enqueueDurably runs each call's enqueue script and then WAIT on one
// connection of the primary that owns the call's queue. WAIT counts the
// replicas that have received this connection's writes, so sent on any other
// connection it would prove nothing; and WAIT inside MULTI does not block,
// hence a plain pipeline. On a Cluster the calls are grouped by master. A
// call that did not run (NOSCRIPT, or MOVED and the like after a failover or
// resharding) is tried again a few times, after loading the script or
// refreshing the slot map; a call that may have run is never repeated.
func (b *core) enqueueDurably(ctx context.Context, pending []*enqueueCall) {
	const rounds = 5
	for round := 1; len(pending) > 0; round++ {
		groups := map[redis.Cmdable][]*enqueueCall{}
		var nodes []redis.Cmdable
		for _, c := range pending {
			node, err := b.nodeFor(ctx, c.k.ready0())
			if err != nil {
				c.cmd = redis.NewCmd(ctx)
				c.cmd.SetErr(err)
				continue
			}
			if groups[node] == nil {
				nodes = append(nodes, node)
			}
			groups[node] = append(groups[node], c)
		}
		pending = nil
		redirected := false
		for _, node := range nodes {
			group := groups[node]
			_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, c := range group {
					c.cmd = b.queueScript(ctx, p, c.script, c.keys, c.args)
				}
				// Pipeliner lacks Wait: the raw command, timeout in milliseconds.
				acks := redis.NewIntCmd(ctx, "WAIT", b.opts.WaitReplicas, b.opts.WaitTimeout.Milliseconds())
				_ = p.Process(ctx, acks)
				for _, c := range group {
					c.acks = acks
				}
				return nil
			})
			for _, c := range group {
				err := c.cmd.Err()
				switch {
				case err == nil:
				case round < rounds && notRun(err):
					_ = b.loadFor(ctx, node, c.script, err)
					pending = append(pending, c)
				case round < rounds && (redis.HasErrorPrefix(err, "MOVED") || redis.HasErrorPrefix(err, "ASK") ||
					redis.HasErrorPrefix(err, "TRYAGAIN") || redis.HasErrorPrefix(err, "CLUSTERDOWN")):
					redirected = true
					pending = append(pending, c)
				case replyLost(err): // it may have run: never sent again here
					c.cmd.SetErr(&OutcomeUnknownError{Op: c.op, Queue: c.queueName, RequestID: c.request, Sends: round, Err: err})
				}
			}
		}
		if redirected {
			if cc, ok := b.rdb.(*redis.ClusterClient); ok {
				cc.ReloadState(ctx) // asynchronous: give it a moment
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(round) * 50 * time.Millisecond):
			}
		}
	}
}

// answer reads a sent call's answers: the script's, then, on the durable
// path, WAIT's.
func (b *core) answer(c *enqueueCall) Enqueued {
	e := b.enqueued(c)
	if b.opts.WaitReplicas == 0 || e.Err != nil {
		return e // nothing written is nothing to wait for
	}
	queue, id := c.k.name, c.id
	n, err := c.acks.Result()
	if err != nil {
		e.Err = fmt.Errorf("fenceq: enqueue %q in queue %q: %w: WAIT failed: %w (the job is stored on the primary)", id, queue, ErrNotReplicated, err)
	} else if int(n) < b.opts.WaitReplicas {
		e.Err = fmt.Errorf("fenceq: enqueue %q in queue %q: %w: %d of %d replicas acknowledged within %v (the job is stored on the primary, and lost only if it fails over before replicating)",
			id, queue, ErrNotReplicated, n, b.opts.WaitReplicas, b.opts.WaitTimeout)
	}
	return e
}

// prepare validates j, gives it an id when it has none, registers its queue
// and builds the enqueue script's arguments.
func (b *core) prepare(ctx context.Context, j *Job) (*enqueueCall, error) {
	if err := b.validate(j); err != nil {
		return nil, err
	}
	// The nonce tells a re-send of this request (its reply lost) from
	// another enqueue of the same id. An id generated here is a nonce of
	// its own: no other request can name it.
	nonce := ""
	if j.ID == "" {
		u, err := uuid.NewV7()
		if err != nil {
			return nil, fmt.Errorf("fenceq: enqueue: new job id: %w", err)
		}
		j.ID = u.String()
	} else {
		nonce = NewRequestID()
	}
	k := b.queueKeys(j.Queue)
	if err := b.register(ctx, k); err != nil {
		return nil, err
	}
	delayMS, atMS := int64(-1), int64(-1)
	if j.RunAt.IsZero() {
		delayMS = j.Delay.Milliseconds()
	} else {
		atMS = j.RunAt.UnixMilli()
	}
	unique := ""
	if j.UniqueKey != "" {
		unique = k.derived(kindUnique, j.UniqueKey)
	}
	policy := "cancel"
	if j.RunIfDependencyFails {
		policy = "run"
	}
	args := make([]any, 0, 13+len(j.DependsOn))
	args = append(args, j.ID, j.Kind, j.Payload, cmp.Or(j.MaxAttempts, MaxAttemptsDefault), j.Priority, delayMS, atMS,
		unique, j.UniqueFor.Milliseconds(), policy, nonce, encodeMetadata(j.Metadata), j.Group)
	for _, d := range j.DependsOn {
		args = append(args, d)
	}
	c := &enqueueCall{scriptCall: newScriptCall(b.scripts.enqueue, k, args), k: k, id: j.ID, unique: j.UniqueKey}
	c.op, c.request = "enqueue", j.ID
	return c, nil
}

// enqueued reads the enqueue script's answer to c.
func (b *core) enqueued(c *enqueueCall) Enqueued {
	queue, id := c.k.name, c.id
	v, err := c.cmd.Result()
	r := newQueueReply("enqueue", queue, v, err)
	switch s := r.status(); s {
	case statusOK:
	case statusExists:
		if state := State(r.str()); r.err == nil {
			return Enqueued{ID: id, Err: &DuplicateError{Queue: queue, ID: id, State: state}}
		}
	case statusUniqueHeld:
		if holder, state := r.str(), State(r.str()); r.err == nil {
			return Enqueued{ID: holder, Existing: true,
				Err: &UniqueHeldError{Queue: queue, Key: c.unique, HolderID: holder, HolderState: state}}
		}
	case statusNoDependency:
		if parent := r.str(); r.err == nil {
			return Enqueued{ID: id, Err: &ValidationError{Field: "depends on", Value: parent, Reason: "no such job in queue " + queue +
				": it was never enqueued, or it finished and retention deleted it (enqueue a dependent while its parent is kept, or keep more)"}}
		}
	default:
		r.unexpected(s)
	}
	return Enqueued{ID: id, Err: r.err}
}

// Enqueued is EnqueueMany's answer for one job.
type Enqueued struct {
	ID string // the job's id: the holder's when Existing
	// Existing: the job's unique key was held, and ID is the job holding
	// it; nothing was written (Err is then a *UniqueHeldError).
	Existing bool
	Err      error // as Enqueue's: *ValidationError, *DuplicateError, *UniqueHeldError, or a Redis error
}

// EnqueueMany stores many jobs in one pipeline: one round trip on a single
// Redis, however many queues they go to. Each job is atomic on its own; the
// answers are in the order of jobs. It follows the batch rule of the
// package doc with no error of its own: each answer's Err is its job's
// refusal or its failed call's error. Sent again after a lost reply, a job
// the first send created answers as created; one it refused (nothing was
// written) is judged again, so a job whose dependency a later job of the
// same batch created is enqueued the second time.
func (b *Client) EnqueueMany(ctx context.Context, jobs []Job) []Enqueued {
	out := make([]Enqueued, len(jobs))
	calls := make([]*enqueueCall, 0, len(jobs))
	at := make([]int, 0, len(jobs)) // each call's position in jobs
	var spans []trace.Span          // each job's producer span, when tracing
	if b.tracer != nil {
		spans = make([]trace.Span, len(jobs))
		defer endEnqueues(spans, out) // out is filled in place by then
	}
	for i, j := range jobs {
		if spans != nil {
			spans[i] = b.traceEnqueue(ctx, &j)
		}
		c, err := b.prepare(ctx, &j)
		if err != nil {
			out[i] = Enqueued{ID: j.ID, Err: err}
			continue
		}
		calls = append(calls, c)
		at = append(at, i)
	}
	if len(calls) == 0 {
		return out
	}
	b.send(ctx, calls)
	for n, c := range calls {
		out[at[n]] = b.answer(c)
	}
	return out
}
