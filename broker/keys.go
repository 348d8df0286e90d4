package broker

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"unicode/utf8"
)

const (
	maxNameBytes = 200  // queue and kind names
	maxIDBytes   = 1024 // job ids
)

// queueKeys are the key names of one queue, built once per queue.
type queueKeys struct {
	name       string
	job        string      // job hash prefix: job key = job + id
	list       []string    // KEYS of every script, in lib.lua's order
	registered atomic.Bool // added to the queues set by this broker
}

func (b *Broker) queueKeys(queue string) *queueKeys {
	if k, ok := b.queues.Load(queue); ok {
		return k.(*queueKeys)
	}
	base := b.opts.Prefix + ":{" + queue + "}:"
	k := &queueKeys{name: queue, job: base + "job:"}
	for _, s := range []string{"ready", "scheduled", "leases", "dead", "done", "cancelled", "wake", "seq", "paused", "limits", "starts", "events", "blocked", "gen", "cascade", "stats"} {
		k.list = append(k.list, base+s)
	}
	actual, _ := b.queues.LoadOrStore(queue, k)
	return actual.(*queueKeys)
}

// key is one of the queue's keys by name ("wake", "limits", ...).
func (k *queueKeys) key(name string) string { return k.base() + name }

// base is the queue's key prefix, "<prefix>:{<queue>}:".
func (k *queueKeys) base() string { return k.job[:len(k.job)-len("job:")] }

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

// ValidateQueue answers the *ValidationError any operation on queue would:
// for a worker to refuse a bad queue name in its constructor.
func ValidateQueue(queue string) error { return validName("queue", queue) }

// register adds the queue to the queues set, once per broker and queue. The
// set lives outside every queue's slot, so it cannot be written by a script.
func (b *Broker) register(ctx context.Context, k *queueKeys) error {
	if k.registered.Load() {
		return nil
	}
	if err := b.rdb.SAdd(ctx, b.queuesKey(), k.name).Err(); err != nil {
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
