package broker

import (
	"fmt"
	"time"
)

// reply reads a script's array reply field by field. A reply of the wrong
// shape (a script and a broker of different versions) becomes an error, never
// a panic.
type reply struct {
	op   string
	vals []any
	pos  int
	err  error
}

func newReply(op string, v any, err error) *reply {
	r := &reply{op: op}
	if err != nil {
		r.err = fmt.Errorf("fenceq: %s: %w", op, err)
		return r
	}
	vals, ok := v.([]any)
	if !ok {
		r.err = fmt.Errorf("fenceq: %s: unexpected reply %T", op, v)
	}
	r.vals = vals
	return r
}

func (r *reply) more() bool { return r.err == nil && r.pos < len(r.vals) }

func (r *reply) next() any {
	if r.err != nil {
		return nil
	}
	if r.pos >= len(r.vals) {
		r.err = fmt.Errorf("fenceq: %s: reply ends after %d values", r.op, len(r.vals))
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
		r.err = fmt.Errorf("fenceq: %s: reply value %d is a %T, not a string", r.op, r.pos, v)
	}
	return ""
}

func (r *reply) int() int64 {
	v := r.next()
	if n, ok := v.(int64); ok {
		return n
	}
	if r.err == nil {
		r.err = fmt.Errorf("fenceq: %s: reply value %d is a %T, not an integer", r.op, r.pos, v)
	}
	return 0
}

func (r *reply) time() time.Time { return msTime(r.int()) }

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
