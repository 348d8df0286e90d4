package broker

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// queueCall is one script call for the items of one queue in a batch.
type queueCall struct {
	k     *queueKeys
	idx   []int  // positions of its items in the caller's slice
	args  []any  // the items' arguments, in order
	reply *reply // filled in by pipeline
}

// perQueue groups n items by queue and runs the script once per queue, all
// calls in one pipeline (see pipeline). head starts every call's
// arguments; argsOf gives item i's.
func (b *Broker) perQueue(ctx context.Context, op string, s *redis.Script, n int,
	queueOf func(i int) string, head []any, argsOf func(i int) []any) ([]*queueCall, error) {
	calls, err := b.byQueue(n, queueOf, argsOf)
	if err != nil {
		return nil, err
	}
	b.pipeline(ctx, op, s, calls, func(*queueCall) []any { return head })
	return calls, nil
}

// byQueue groups n items by queue, one call per queue in the order the
// queues first appear; argsOf gives item i's arguments.
func (b *Broker) byQueue(n int, queueOf func(i int) string, argsOf func(i int) []any) ([]*queueCall, error) {
	var calls []*queueCall
	seen := map[string]*queueCall{}
	for i := range n {
		q := queueOf(i)
		c := seen[q]
		if c == nil {
			if err := validName("queue", q); err != nil {
				return nil, err
			}
			c = &queueCall{k: b.queueKeys(q)}
			seen[q] = c
			calls = append(calls, c)
		}
		c.idx = append(c.idx, i)
		c.args = append(c.args, argsOf(i)...)
	}
	return calls, nil
}

// pipeline runs the script once per call, head(c) then c's items as its
// arguments, all calls in one pipeline: one round trip on a single Redis
// (go-redis splits it by node on a Cluster). A call that meets NOSCRIPT is
// run again on its own, which reloads the script.
func (b *Broker) pipeline(ctx context.Context, op string, s *redis.Script, calls []*queueCall, head func(c *queueCall) []any) {
	args := make([][]any, len(calls))
	for i, c := range calls {
		args[i] = append(append([]any{c.k.base}, head(c)...), c.args...)
	}
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = s.EvalSha(ctx, p, c.k.list, args[i]...)
		}
		return nil
	})
	for i, c := range calls {
		v, err := cmds[i].Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			v, err = s.Run(ctx, b.rdb, c.k.list, args[i]...).Result()
		}
		c.reply = newReply(op+" "+c.k.name, v, err)
	}
}
