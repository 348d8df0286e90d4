package broker

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// queueCall is one script call for the items of one queue in a batch.
type queueCall struct {
	k     *queueKeys
	idx   []int     // positions of its items in the caller's slice
	args  []any     // the items' arguments, in order
	reply *reply    // filled in by pipeline
	sent  time.Time // when the send that answered went out (pipeline with resend)
}

// perQueue groups n items by queue and runs the script once per queue, all
// calls in one pipeline (see pipeline). head starts every call's
// arguments; argsOf appends item i's.
func (b *core) perQueue(ctx context.Context, op string, s *script, n int,
	queueOf func(i int) string, head []any, argsOf func(args []any, i int) []any) ([]*queueCall, error) {
	calls, err := b.byQueue(n, queueOf, argsOf)
	if err != nil {
		return nil, err
	}
	b.pipeline(ctx, op, s, calls, func(*queueCall) []any { return head }, nil)
	return calls, nil
}

// byQueue groups n items by queue, one call per queue in the order the
// queues first appear; argsOf appends item i's arguments to args. A batch
// of a few queues (a pool's) finds its calls by a scan, with no map.
func (b *core) byQueue(n int, queueOf func(i int) string, argsOf func(args []any, i int) []any) ([]*queueCall, error) {
	const scanned = 8 // queues found by a scan; a map past that
	var calls []*queueCall
	var seen map[string]*queueCall
	for i := range n {
		q := queueOf(i)
		var c *queueCall
		if seen != nil {
			c = seen[q]
		} else {
			for _, call := range calls {
				if call.k.name == q {
					c = call
					break
				}
			}
		}
		if c == nil {
			if err := validName("queue", q); err != nil {
				return nil, err
			}
			c = &queueCall{k: b.queueKeys(q)}
			calls = append(calls, c)
			if seen != nil {
				seen[q] = c
			} else if len(calls) > scanned {
				seen = make(map[string]*queueCall, 2*len(calls))
				for _, call := range calls {
					seen[call.k.name] = call
				}
			}
		}
		c.idx = append(c.idx, i)
		c.args = argsOf(c.args, i)
	}
	return calls, nil
}

// pipeline runs the script once per call, head(c) then c's items as its
// arguments, all calls in one round trip (evalAll). With resend, a call
// whose reply was lost is sent again (eval); resend(c) names the call's
// operation and request for an *OutcomeUnknownError.
func (b *core) pipeline(ctx context.Context, op string, s *script, calls []*queueCall, head func(c *queueCall) []any,
	resend func(c *queueCall) (op, request string)) {
	evals := make([]*scriptCall, len(calls))
	for i, c := range calls {
		evals[i] = newScriptCall(s, c.k, head(c), c.args)
		if resend != nil {
			evals[i].op, evals[i].request = resend(c)
		}
	}
	if resend != nil {
		b.eval(ctx, evals, false)
	} else {
		b.evalAll(ctx, evals)
	}
	for i, c := range calls {
		v, err := evals[i].cmd.Result()
		c.reply, c.sent = newQueueReply(op, c.k.name, v, err), evals[i].sent
	}
}

// scriptCall is one script call for one queue, sent with others.
type scriptCall struct {
	script *script
	keys   []string   // its KEYS: the queue's first key (broker.run)
	args   []any      // ARGV, the queue's key prefix first
	cmd    *redis.Cmd // the answer, once sent
	sent   time.Time  // when the send that answered went out (eval)
	// What an *OutcomeUnknownError says of the call (eval): its operation,
	// queue, and the request to ask about.
	op, queueName, request string
}

// newScriptCall is a call of s for k's queue whose ARGV is the queue's key
// prefix, then parts in order.
func newScriptCall(s *script, k *queueKeys, parts ...[]any) *scriptCall {
	n := 1
	for _, p := range parts {
		n += len(p)
	}
	args := make([]any, 1, n)
	args[0] = k.baseArg
	for _, p := range parts {
		args = append(args, p...)
	}
	return &scriptCall{script: s, keys: k.list[:1], args: args, queueName: k.name}
}

// evalAll runs the calls in one pipeline: one round trip on a single Redis
// (go-redis splits it by node on a Cluster). A call that did not run
// because its node lacks the script or the library (each node of a Cluster
// has its own; SCRIPT FLUSH, FUNCTION FLUSH and a restart empty them), or
// has no FUNCTION, is run again on its own, which loads what it needs.
func (b *core) evalAll(ctx context.Context, calls []*scriptCall) {
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, c := range calls {
			c.cmd = b.queueScript(ctx, p, c.script, c.keys, c.args)
		}
		return nil
	})
	for _, c := range calls {
		if notRun(c.cmd.Err()) {
			c.cmd = b.runScript(ctx, c.script, c.keys, c.args)
		}
	}
}
