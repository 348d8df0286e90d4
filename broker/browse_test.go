package broker_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

func browseBroker(t *testing.T) (*broker.Broker, context.Context) {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b, context.Background()
}

func enqueueN(t *testing.T, b *broker.Broker, ctx context.Context, queue string, n int, kind func(i int) string) []string {
	t.Helper()
	var ids []string
	for i := range n {
		id := fmt.Sprintf("job-%03d", i)
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: queue, Kind: kind(i), ID: id}); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	return ids
}

func pageIDs(p broker.Page) []string {
	var out []string
	for _, j := range p.Jobs {
		out = append(out, j.ID)
	}
	return out
}

// walk reads every page of q and answers the ids in order.
func walk(t *testing.T, b *broker.Broker, ctx context.Context, queue string, q broker.JobQuery) ([]string, int) {
	t.Helper()
	var all []string
	pages := 0
	for {
		p, err := b.Inspector().JobPage(ctx, queue, q)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		all = append(all, pageIDs(p)...)
		if p.Next == "" {
			return all, pages
		}
		q.After = p.Next
		if pages > 100 {
			t.Fatal("more than 100 pages: the cursor does not advance")
		}
	}
}

func TestJobPage(t *testing.T) {
	t.Run("pages walk the index once in each direction", func(t *testing.T) {
		b, ctx := browseBroker(t)
		ids := enqueueN(t, b, ctx, "q", 23, func(int) string { return "k" })
		got, pages := walk(t, b, ctx, "q", broker.JobQuery{State: broker.StatePending, Limit: 5})
		if !slices.Equal(got, ids) || pages != 5 {
			t.Fatalf("oldest first: got %v in %d pages, want %v in 5", got, pages, ids)
		}
		got, _ = walk(t, b, ctx, "q", broker.JobQuery{State: broker.StatePending, Limit: 5, Newest: true})
		want := slices.Clone(ids)
		slices.Reverse(want)
		if !slices.Equal(got, want) {
			t.Fatalf("newest first: got %v, want %v", got, want)
		}
	})

	t.Run("a cursor goes on after its job even when jobs before it left", func(t *testing.T) {
		b, ctx := browseBroker(t)
		ids := enqueueN(t, b, ctx, "q", 10, func(int) string { return "k" })
		p, err := b.Inspector().JobPage(ctx, "q", broker.JobQuery{State: broker.StatePending, Limit: 4})
		if err != nil {
			t.Fatal(err)
		}
		// Claim three jobs: the ranks of the rest shift by three.
		if _, err := b.Leases().Claim(ctx, "q", 3, time.Minute); err != nil {
			t.Fatal(err)
		}
		next, err := b.Inspector().JobPage(ctx, "q", broker.JobQuery{State: broker.StatePending, Limit: 4, After: p.Next})
		if err != nil {
			t.Fatal(err)
		}
		if got := pageIDs(next); !slices.Equal(got, ids[4:8]) {
			t.Fatalf("after claims, next page = %v, want %v", got, ids[4:8])
		}
		// The job the cursor names leaves too: the page goes on from its place.
		if _, err := b.Inspector().Cancel(ctx, "q", ids[7]); err != nil {
			t.Fatal(err)
		}
		after, err := b.Inspector().JobPage(ctx, "q", broker.JobQuery{State: broker.StatePending, Limit: 4, After: next.Next})
		if err != nil {
			t.Fatal(err)
		}
		if got := pageIDs(after); !slices.Equal(got, ids[8:]) {
			t.Fatalf("after the cursor's job left, page = %v, want %v", got, ids[8:])
		}
	})

	t.Run("a filter examines at most its budget and says so", func(t *testing.T) {
		b, ctx := browseBroker(t)
		ids := enqueueN(t, b, ctx, "q", 40, func(i int) string {
			if i%10 == 9 {
				return "rare"
			}
			return "common"
		})
		p, err := b.Inspector().JobPage(ctx, "q", broker.JobQuery{State: broker.StatePending, Kind: "rare", Limit: 5, Examine: 15})
		if err != nil {
			t.Fatal(err)
		}
		if !p.Truncated || p.Examined != 15 || !slices.Equal(pageIDs(p), []string{ids[9]}) || p.Next == "" {
			t.Fatalf("page = %v, examined %d, truncated %v, next %q; want [%s], 15 examined, truncated, a next cursor",
				pageIDs(p), p.Examined, p.Truncated, p.Next, ids[9])
		}
		got, _ := walk(t, b, ctx, "q", broker.JobQuery{State: broker.StatePending, Kind: "rare", Limit: 5, Examine: 15})
		if want := []string{ids[9], ids[19], ids[29], ids[39]}; !slices.Equal(got, want) {
			t.Fatalf("continuing a truncated filter found %v, want %v", got, want)
		}
		none, err := b.Inspector().JobPage(ctx, "q", broker.JobQuery{State: broker.StatePending, Kind: "nothing", Examine: 1000})
		if err != nil {
			t.Fatal(err)
		}
		if len(none.Jobs) != 0 || none.Truncated || none.Next != "" || none.Examined != 40 {
			t.Fatalf("a filter matching nothing in a short index: %+v; want no jobs, 40 examined, the end", none)
		}
		exact, err := b.Inspector().JobPage(ctx, "q", broker.JobQuery{State: broker.StatePending, Kind: "nothing", Examine: 40})
		if err != nil {
			t.Fatal(err)
		}
		if exact.Truncated || exact.Next != "" || exact.Examined != 40 {
			t.Fatalf("a budget that ends with the index: %+v; want the end, not a truncated page", exact)
		}
	})

	t.Run("an id prefix filters without reading the jobs", func(t *testing.T) {
		b, ctx := browseBroker(t)
		enqueueN(t, b, ctx, "q", 30, func(int) string { return "k" })
		got, _ := walk(t, b, ctx, "q", broker.JobQuery{State: broker.StatePending, IDPrefix: "job-01", Limit: 3})
		want := []string{"job-010", "job-011", "job-012", "job-013", "job-014", "job-015", "job-016", "job-017", "job-018", "job-019"}
		if !slices.Equal(got, want) {
			t.Fatalf("prefix job-01: %v, want %v", got, want)
		}
	})

	t.Run("bad arguments are refused", func(t *testing.T) {
		b, ctx := browseBroker(t)
		for _, q := range []broker.JobQuery{
			{State: "nope"}, {State: broker.StateDone, Limit: broker.PageLimitMax + 1},
			{State: broker.StateDone, After: "not a cursor"}, {State: broker.StateDone, Examine: -1},
		} {
			if _, err := b.Inspector().JobPage(ctx, "q", q); err == nil {
				t.Errorf("JobPage(%+v) answered no error", q)
			}
		}
	})
}

func TestJobLinks(t *testing.T) {
	b, ctx := browseBroker(t)
	for _, j := range []broker.Job{
		{Queue: "q", Kind: "k", ID: "parent"},
		{Queue: "q", Kind: "k", ID: "other"},
		{Queue: "q", Kind: "k", ID: "child", DependsOn: []string{"parent", "other", "parent"}, RunIfDependencyFails: true, UniqueKey: "u1"},
	} {
		if _, err := b.Client().Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	child, err := b.Inspector().JobLinks(ctx, "q", "child", 10)
	if err != nil {
		t.Fatal(err)
	}
	wantDeps := []broker.Related{{ID: "parent", State: broker.StatePending}, {ID: "other", State: broker.StatePending}}
	if !slices.Equal(child.DependsOn, wantDeps) || child.DependsOnTotal != 2 || !child.RunIfDependencyFails || child.UniqueKey != "u1" {
		t.Fatalf("child's links = %+v; want deps %v, run anyway, unique key u1", child, wantDeps)
	}
	parent, err := b.Inspector().JobLinks(ctx, "q", "parent", 10)
	if err != nil {
		t.Fatal(err)
	}
	if want := []broker.Related{{ID: "child", State: broker.StateBlocked}}; !slices.Equal(parent.Waiting, want) || len(parent.DependsOn) != 0 {
		t.Fatalf("parent's links = %+v; want child waiting", parent)
	}
	// Once the child no longer waits (cancelled), it is not listed.
	if _, err := b.Inspector().Cancel(ctx, "q", "child"); err != nil {
		t.Fatal(err)
	}
	parent, err = b.Inspector().JobLinks(ctx, "q", "parent", 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(parent.Waiting) != 0 {
		t.Fatalf("after the child was cancelled, parent's waiting = %v, want none", parent.Waiting)
	}
}
