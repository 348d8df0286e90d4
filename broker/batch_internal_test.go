package broker

import (
	"fmt"
	"slices"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// byQueue groups a batch's items into one call per queue, in the order the
// queues first appear, each call with its items' positions and arguments
// in order: by a scan for a few queues, by a map past that.
func TestByQueueGroups(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := New(rdb, Options{Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	for _, queues := range []int{1, 3, 8, 9, 20} {
		t.Run(fmt.Sprintf("queues=%d", queues), func(t *testing.T) {
			n := 3 * queues
			queueOf := func(i int) string { return fmt.Sprintf("q%d", (i*7)%queues) }
			calls, err := b.byQueue(n, queueOf, func(args []any, i int) []any { return append(args, i, -i) })
			if err != nil {
				t.Fatal(err)
			}
			var order []string
			for i := range n {
				if !slices.Contains(order, queueOf(i)) {
					order = append(order, queueOf(i))
				}
			}
			if len(calls) != len(order) {
				t.Fatalf("%d calls, want %d", len(calls), len(order))
			}
			for c, call := range calls {
				if call.k.name != order[c] {
					t.Errorf("call %d is queue %s, want %s", c, call.k.name, order[c])
				}
				var idx []int
				var args []any
				for i := range n {
					if queueOf(i) == order[c] {
						idx, args = append(idx, i), append(args, i, -i)
					}
				}
				if !slices.Equal(call.idx, idx) || !slices.Equal(call.args, args) {
					t.Errorf("queue %s: idx %v args %v, want %v %v", order[c], call.idx, call.args, idx, args)
				}
			}
		})
	}
}
