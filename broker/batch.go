package broker

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// queueCall is one script call for the items of one queue in a batch.
type queueCall struct {
	k     *queueKeys
	idx   []int  // positions of its items in the caller's slice
	args  []any  // ARGV after the job key prefix
	reply *reply // filled in by perQueue
}

// perQueue groups n items by queue and runs the script once per queue, all
// calls in one pipeline (one round trip on a single Redis; go-redis splits
// it by node on a Cluster). A call that meets NOSCRIPT is run again on its
// own, which reloads the script. head starts every call's arguments;
// argsOf gives item i's.
func (b *Broker) perQueue(ctx context.Context, op string, s *redis.Script, n int,
	queueOf func(i int) string, head []any, argsOf func(i int) []any) ([]*queueCall, error) {
	var calls []*queueCall
	byQueue := map[string]*queueCall{}
	for i := range n {
		q := queueOf(i)
		c := byQueue[q]
		if c == nil {
			if err := validName("queue", q); err != nil {
				return nil, err
			}
			c = &queueCall{k: b.queueKeys(q), args: append([]any(nil), head...)}
			byQueue[q] = c
			calls = append(calls, c)
		}
		c.idx = append(c.idx, i)
		c.args = append(c.args, argsOf(i)...)
	}
	cmds := make([]*redis.Cmd, len(calls))
	_, _ = b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = s.EvalSha(ctx, p, c.k.list, withJobPrefix(c.k, c.args)...)
		}
		return nil
	})
	for i, c := range calls {
		v, err := cmds[i].Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			v, err = b.run(ctx, s, c.k, c.args...).Result()
		}
		c.reply = newReply(op+" "+c.k.name, v, err)
	}
	return calls, nil
}
