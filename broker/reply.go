package broker

import (
	"fmt"
	"time"
)

// reply reads a script's array reply field by field. A reply of the wrong
// shape (a script and a broker of different versions) becomes an error, never
// a panic.
type reply struct {
	op    string
	queue string // "" or the queue op was about: its errors say "op queue"
	vals  []any
	pos   int
	err   error
}

func newReply(op string, v any, err error) *reply { return newQueueReply(op, "", v, err) }

// newQueueReply is newReply for an operation about queue. The two are
// joined only for an error, so that reading a good reply builds no
// string.
func newQueueReply(op, queue string, v any, err error) *reply {
	r := &reply{op: op, queue: queue}
	if err != nil {
		r.err = fmt.Errorf("fenceq: %s: %w", r.what(), err)
		return r
	}
	vals, ok := v.([]any)
	if !ok {
		r.err = fmt.Errorf("fenceq: %s: unexpected reply %T", r.what(), v)
	}
	r.vals = vals
	return r
}

// what names the operation in the reply's errors.
func (r *reply) what() string {
	if r.queue == "" {
		return r.op
	}
	return r.op + " " + r.queue
}

func (r *reply) more() bool { return r.err == nil && r.pos < len(r.vals) }

func (r *reply) next() any {
	if r.err != nil {
		return nil
	}
	if r.pos >= len(r.vals) {
		r.err = fmt.Errorf("fenceq: %s: reply ends after %d values", r.what(), len(r.vals))
		return nil
	}
	v := r.vals[r.pos]
	r.pos++
	return v
}

func (r *reply) str() string {
	v := r.next()
	switch v := v.(type) {
	case string:
		return v
	case int64:
		return fmt.Sprint(v)
	case nil:
		return ""
	}
	if r.err == nil {
		r.err = fmt.Errorf("fenceq: %s: reply value %d is a %T, not a string", r.what(), r.pos, v)
	}
	return ""
}

func (r *reply) int() int64 {
	v := r.next()
	if n, ok := v.(int64); ok {
		return n
	}
	if r.err == nil {
		r.err = fmt.Errorf("fenceq: %s: reply value %d is a %T, not an integer", r.what(), r.pos, v)
	}
	return 0
}

func (r *reply) time() time.Time { return msTime(r.int()) }

// entry is a run of width values of a reply, read by position within it
// (a claimed job's, at the claimReply constants).
type entry struct {
	r    *reply
	base int // the position of the entry's first value in r.vals
}

// entry takes the next width values as one entry. A reply that ends
// before them is an error, and the entry's values read as zero.
func (r *reply) entry(width int) entry {
	e := entry{r: r, base: r.pos}
	if r.err == nil && r.pos+width > len(r.vals) {
		r.err = fmt.Errorf("fenceq: %s: reply ends after %d values", r.what(), len(r.vals))
	}
	r.pos += width
	return e
}

// str reads the entry's value at position i as a string, as reply.str does.
func (e entry) str(i int) string {
	if e.r.err != nil {
		return ""
	}
	switch v := e.r.vals[e.base+i].(type) {
	case string:
		return v
	case int64:
		return fmt.Sprint(v)
	case nil:
		return ""
	default:
		e.r.err = fmt.Errorf("fenceq: %s: reply value %d is a %T, not a string", e.r.what(), e.base+i+1, v)
	}
	return ""
}

// int reads the entry's value at position i as an integer.
func (e entry) int(i int) int64 {
	if e.r.err != nil {
		return 0
	}
	n, ok := e.r.vals[e.base+i].(int64)
	if !ok {
		e.r.err = fmt.Errorf("fenceq: %s: reply value %d is a %T, not an integer", e.r.what(), e.base+i+1, e.r.vals[e.base+i])
	}
	return n
}

// settled reads a guarded script's {status, the job's state after the
// call}: OK and that state, or Stale.
func (r *reply) settled() (Outcome, State) {
	s, st := r.status(), State(r.str())
	switch s {
	case statusOK:
		return OK, st
	case statusStale:
		return Stale, ""
	}
	r.unexpected(s)
	return Stale, ""
}

// job judges the status s of a script's reply about one named job: the
// error for a job that is not there (ErrJobNotFound) or not readable
// (*CorruptJobError), or the reply's error; nil when s is ok and the
// payload follows.
func (r *reply) job(s status, queue, id string) error {
	switch s {
	case statusOK:
	case statusMissing:
		return notFound(queue, id)
	case statusCorrupt:
		if reason := r.str(); r.err == nil {
			return &CorruptJobError{Queue: queue, ID: id, Reason: reason}
		}
	default:
		r.unexpected(s)
	}
	return r.err
}

// status reads a status code (status.go).
func (r *reply) status() status { return status(r.int()) }

// unexpected records a status the operation cannot answer (a script and a
// broker of different versions) as the reply's error.
func (r *reply) unexpected(s status) {
	if r.err == nil {
		r.err = fmt.Errorf("fenceq: %s: unexpected reply status %v", r.what(), s)
	}
}

func msTime(ms int64) time.Time {
	if ms <= 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// problems reads the (id, problem) pairs that close claim and reap replies.
func (r *reply) problems(queue string) []CorruptJobError {
	var out []CorruptJobError
	for r.more() {
		out = append(out, CorruptJobError{Queue: queue, ID: r.str(), Reason: r.str()})
	}
	return out
}
