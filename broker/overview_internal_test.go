package broker

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The last 60 s take the current minute's count whole and the previous
// minute's in the share they still cover.
func TestLastMinute(t *testing.T) {
	m := time.Minute.Milliseconds()
	for _, tc := range []struct {
		now, current, previous, want int64
	}{
		{100 * m, 0, 60, 60},            // at a minute's start the 60 s are the previous minute
		{100*m + 15000, 10, 60, 55},     // 15 s in: three quarters of the previous one
		{100*m + 30000, 7, 3, 9},        // half of 3, rounded
		{100*m + m - 1, 50, 10_000, 50}, // its last millisecond: the current one
		{100*m + 20000, 0, 0, 0},
	} {
		if got := lastMinute(tc.now, tc.current, tc.previous); got != tc.want {
			t.Errorf("lastMinute(%d s into a minute, %d, %d) = %d, want %d", tc.now%m/1000, tc.current, tc.previous, got, tc.want)
		}
	}
}

// A stats key that is not a hash (a hand edit) costs Overview its figure
// of done jobs, not the whole overview.
func TestOverviewWithAStatsKeyThatIsNoHash(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := New(rdb, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, Job{Queue: "q", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Set(ctx, b.queueKeys("q").stats(), "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	o, err := b.Inspector().Overview(ctx, "q")
	if err != nil || o.Pending != 1 || o.DoneLastMinute != 0 {
		t.Fatalf("Overview = %+v, %v; want 1 pending, 0 done in the last minute", o, err)
	}
}
