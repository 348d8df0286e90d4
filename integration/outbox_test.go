package integration

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/outbox"
	"github.com/fenceq/fenceq/worker"
)

// postgres connects to the machine's PostgreSQL (FENCEQ_PG_URL, default the
// local test database), or skips loudly; under CI=true it fails instead.
func postgres(t *testing.T) *sql.DB {
	t.Helper()
	url := os.Getenv("FENCEQ_PG_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
	}
	db, err := sql.Open("pgx", url)
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		err = db.PingContext(ctx)
		cancel()
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("PostgreSQL at %s: %v", url, err)
		}
		t.Skipf("SKIP (PostgreSQL): %s: %v", url, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func outboxRig(t *testing.T) (*sql.DB, *broker.Broker, string) {
	return outboxRigOn(t, client(t))
}

func outboxRigOn(t *testing.T, rdb redis.UniversalClient) (*sql.DB, *broker.Broker, string) {
	db := postgres(t)
	prefix := fmt.Sprintf("fqoutbox-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	b, err := broker.New(rdb, broker.Options{Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	table := fmt.Sprintf("fenceq_outbox_test_%d", time.Now().UnixNano())
	if err := outbox.CreateTable(context.Background(), db, table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.Exec(`DROP TABLE IF EXISTS "` + table + `"`) })
	return db, b, table
}

// newRelay is a relay of table to b, batch rows per round (0: the default).
func newRelay(t *testing.T, db *sql.DB, b *broker.Broker, table string, batch int) *outbox.Relay {
	t.Helper()
	r, err := outbox.NewRelay(db, b.Client(), outbox.RelayOptions{Table: table, Batch: batch})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A job enqueued in a committed transaction reaches Redis exactly once; one
// in a rolled-back transaction never does; a row relayed again after a
// crash (enqueued, but its delete not committed) makes no second job.
func TestOutbox(t *testing.T) {
	t.Parallel()
	t.Run("RealRedis", func(t *testing.T) { testOutbox(t, client(t)) })
	t.Run("Miniredis", func(t *testing.T) {
		c := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
		t.Cleanup(func() { _ = c.Close() })
		testOutbox(t, c)
	})
}

func testOutbox(t *testing.T, rdb redis.UniversalClient) {
	db, b, table := outboxRigOn(t, rdb)
	ctx := context.Background()
	enqueueIn := func(commit bool, id string) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := outbox.Enqueue(ctx, tx, b.Client(), table, broker.Job{Queue: "ob", Kind: "k", ID: id, Payload: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit()
		} else {
			err = tx.Rollback()
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	enqueueIn(true, "committed")
	enqueueIn(false, "rolled-back")
	// A relay that crashed after enqueueing: the job is in Redis, the row
	// is still in the outbox.
	enqueueIn(true, "relayed-before")
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "ob", Kind: "k", ID: "relayed-before", Payload: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, db, b, table, 0)
	n, err := r.RelayOnce(ctx)
	if err != nil || n != 1 {
		t.Fatalf("RelayOnce = %d, %v; want 1 new job", n, err)
	}
	if n, err = r.RelayOnce(ctx); err != nil || n != 0 {
		t.Fatalf("second RelayOnce = %d, %v; want nothing left", n, err)
	}
	c, _ := b.Inspector().Counts(ctx, "ob")
	if c.Pending != 2 {
		t.Fatalf("pending %d, want 2 (committed, relayed-before)", c.Pending)
	}
	if _, err := b.Inspector().Job(ctx, "ob", "rolled-back"); !errors.Is(err, broker.ErrJobNotFound) {
		t.Fatalf("the rolled-back job reached Redis: %v", err)
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM "` + table + `"`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows left in the outbox (%v)", left, err)
	}
}

// Two pools relaying one outbox (SKIP LOCKED) deliver each job once.
func TestOutboxRelayedByPools(t *testing.T) {
	t.Parallel()
	db, b, table := outboxRig(t)
	ctx := context.Background()
	const n = 200
	for i := 0; i < n; i += 50 {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		for k := i; k < i+50; k++ {
			if _, err := outbox.Enqueue(ctx, tx, b.Client(), table, broker.Job{Queue: "ob", Kind: "k", Payload: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan struct{}, n)
	h := handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		mu.Lock()
		seen[j.ID]++
		mu.Unlock()
		done <- struct{}{}
		return nil
	})
	for range 2 {
		p, err := worker.New(b, h, worker.Config{Queues: []worker.Queue{{Name: "ob"}}, PollInterval: 20 * time.Millisecond,
			Outbox: newRelay(t, db, b, table, 30), Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Start(ctx); err != nil {
			t.Fatal(err)
		}
		defer p.Shutdown(context.Background())
	}
	for range n {
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			t.Fatalf("only %d of %d outbox jobs ran", len(seen), n)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	for id, runs := range seen {
		if runs != 1 {
			t.Fatalf("job %s ran %d times", id, runs)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct jobs ran, want %d", len(seen), n)
	}
}

// The runnable SQL fencing example does what the README says: the stale
// worker's UPDATE applies to no row, the successor's stays.
func TestFencedSQLExample(t *testing.T) {
	postgres(t) // skips (or fails under CI) without PostgreSQL
	out, err := exec.Command("go", "run", "../examples/fencedsql").CombinedOutput()
	if err != nil {
		t.Fatalf("go run ../examples/fencedsql: %v\n%s", err, out)
	}
	for _, want := range []string{"writes late: applied=false", `account 7: "set by B"`} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("output lacks %q:\n%s", want, out)
		}
	}
}

// enqueueThroughOutbox writes jobs into the outbox in one committed
// transaction.
func enqueueThroughOutbox(t *testing.T, db *sql.DB, b *broker.Broker, table string, jobs ...broker.Job) {
	t.Helper()
	ctx := context.Background()
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	for _, j := range jobs {
		if _, err := outbox.Enqueue(ctx, tx, b.Client(), table, j); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// A job relayed from the outbox keeps its dependencies and their failure
// policy, and a row whose unique key is held is done, not retried forever.
func TestOutboxCarriesDependenciesAndUniqueKeys(t *testing.T) {
	t.Parallel()
	db, b, table := outboxRig(t)
	ctx := context.Background()
	for _, j := range []broker.Job{{ID: "parent"}, {ID: "gone"}, {ID: "holder", UniqueKey: "u1"}} {
		j.Queue, j.Kind = "ob", "k"
		if _, err := b.Client().Enqueue(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Inspector().Cancel(ctx, "ob", "gone"); err != nil {
		t.Fatal(err)
	}
	enqueueThroughOutbox(t, db, b, table,
		broker.Job{Queue: "ob", Kind: "k", ID: "child", DependsOn: []string{"parent"}},
		broker.Job{Queue: "ob", Kind: "k", ID: "follower", DependsOn: []string{"gone"}},
		broker.Job{Queue: "ob", Kind: "k", ID: "stubborn", DependsOn: []string{"gone"}, RunIfDependencyFails: true},
		broker.Job{Queue: "ob", Kind: "k", ID: "second", UniqueKey: "u1"})
	r := newRelay(t, db, b, table, 0)
	if n, err := r.RelayOnce(ctx); err != nil || n != 3 {
		t.Errorf("RelayOnce = %d, %v; want 3 jobs, and the held unique key counted as relayed", n, err)
	}
	for id, want := range map[string]broker.State{"child": broker.StateBlocked, "follower": broker.StateCancelled, "stubborn": broker.StatePending} {
		j, err := b.Inspector().Job(ctx, "ob", id)
		if err != nil || j.State != want {
			t.Errorf("job %s: %s, %v; want %s", id, j.State, err, want)
		}
	}
	if _, err := b.Inspector().Job(ctx, "ob", "second"); !errors.Is(err, broker.ErrJobNotFound) {
		t.Errorf("the job whose unique key was held reached Redis: %v", err)
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM "` + table + `"`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows left in the outbox (%v)", left, err)
	}
}

// insertOutboxRow writes a row by hand, as a bug or another program might:
// outbox.Enqueue would refuse it.
func insertOutboxRow(t *testing.T, db *sql.DB, table, id, queue, options string) {
	t.Helper()
	if _, err := db.Exec(`INSERT INTO "`+table+`" (id, queue, kind, payload, options) VALUES ($1, $2, 'k', '', $3)`, id, queue, options); err != nil {
		t.Fatal(err)
	}
}

// A batch full of rows Redis will never take (a payload over the limit, a
// dependency that does not exist, a bad queue name, unreadable options)
// is moved aside with its reasons in one round, so the rows behind it are
// relayed by the next.
func TestOutboxRefusedRowsMovedAside(t *testing.T) {
	t.Parallel()
	db, b, table := outboxRig(t)
	ctx := context.Background()
	lenient, err := broker.New(client(t), broker.Options{MaxPayloadBytes: -1})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, broker.MaxPayloadBytesDefault+1)
	enqueueThroughOutbox(t, db, lenient, table,
		broker.Job{Queue: "ob", Kind: "k", ID: "too-big", Payload: big},
		broker.Job{Queue: "ob", Kind: "k", ID: "orphan", DependsOn: []string{"ghost"}})
	insertOutboxRow(t, db, table, "bad-queue", "o{b}", `{}`)
	insertOutboxRow(t, db, table, "bad-options", "ob", `{"priority":"high"}`)
	good := []string{"good-1", "good-2", "good-3"}
	for _, id := range good {
		enqueueThroughOutbox(t, db, b, table, broker.Job{Queue: "ob", Kind: "k", ID: id})
	}

	r := newRelay(t, db, b, table, 4)
	var errs []error
	for range 2 {
		_, err := r.RelayOnce(ctx)
		errs = append(errs, err)
	}
	for _, id := range good {
		if _, err := b.Inspector().Job(ctx, "ob", id); err != nil {
			t.Fatalf("%s not relayed within two rounds: %v (rounds answered %v)", id, err, errs)
		}
	}

	var refused *outbox.RefusedError
	if !errors.As(errs[0], &refused) || len(refused.Rows) != 4 || refused.Err != nil || errs[1] != nil {
		t.Fatalf("rounds answered %v; want a RefusedError of 4 rows, then nil", errs)
	}
	listed, err := outbox.Refused(ctx, db, table, 0)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]string{}
	for _, row := range listed {
		reasons[row.ID] = row.Reason
		if row.ID == "too-big" && len(row.Payload) != len(big) {
			t.Errorf("too-big kept %d payload bytes, want %d", len(row.Payload), len(big))
		}
	}
	for id, want := range map[string]string{"too-big": "payload", "orphan": "no such job", "bad-queue": "queue", "bad-options": "options"} {
		if !strings.Contains(reasons[id], want) {
			t.Errorf("refused row %s: reason %q, want one about %s (listed %+v)", id, reasons[id], want, reasons)
		}
	}
	if len(listed) != 4 {
		t.Errorf("listed %d refused rows, want 4", len(listed))
	}
	if rows, _ := outbox.Refused(ctx, db, table, 1); len(rows) != 1 || rows[0].ID != "too-big" {
		t.Errorf("Refused with limit 1 answered %+v; want the oldest, too-big", rows)
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM "` + table + `"`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows left in the outbox (%v)", left, err)
	}
}

// While Redis cannot be reached, rows stay in the outbox for the next
// round: an outage refuses nothing.
func TestOutboxKeepsRowsWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	db, b, table := outboxRig(t)
	ctx := context.Background()
	enqueueThroughOutbox(t, db, b, table, broker.Job{Queue: "ob", Kind: "k", ID: "a"}, broker.Job{Queue: "ob", Kind: "k", ID: "b"})
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	unreachable, err := broker.New(down, broker.Options{Prefix: b.Prefix()})
	if err != nil {
		t.Fatal(err)
	}
	n, err := newRelay(t, db, unreachable, table, 0).RelayOnce(ctx)
	var refused *outbox.RefusedError
	if n != 0 || err == nil || errors.As(err, &refused) {
		t.Fatalf("RelayOnce without Redis = %d, %v; want an error that refuses nothing", n, err)
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM "` + table + `"`).Scan(&left); err != nil || left != 2 {
		t.Fatalf("%d rows left in the outbox (%v), want 2", left, err)
	}
	if n, err := newRelay(t, db, b, table, 0).RelayOnce(ctx); n != 2 || err != nil {
		t.Fatalf("RelayOnce once Redis is back = %d, %v; want 2", n, err)
	}
}

// A job whose dependency is an outbox row another relay holds (or one this
// batch has not reached) waits for it; it is not refused.
func TestOutboxWaitsForADependencyStillInTheOutbox(t *testing.T) {
	t.Parallel()
	db, b, table := outboxRig(t)
	ctx := context.Background()
	enqueueThroughOutbox(t, db, b, table, broker.Job{Queue: "ob", Kind: "k", ID: "parent"},
		broker.Job{Queue: "ob", Kind: "k", ID: "child", DependsOn: []string{"parent"}})
	other, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback()
	if _, err := other.Exec(`SELECT 1 FROM "` + table + `" WHERE id = 'parent' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	r := newRelay(t, db, b, table, 0)
	if n, err := r.RelayOnce(ctx); n != 0 || err != nil {
		t.Fatalf("RelayOnce while the parent is held = %d, %v; want 0, nil", n, err)
	}
	if err := other.Rollback(); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RelayOnce(ctx); n != 2 || err != nil {
		t.Fatalf("RelayOnce once the parent is free = %d, %v; want 2", n, err)
	}
	if j, err := b.Inspector().Job(ctx, "ob", "child"); err != nil || j.State != broker.StateBlocked {
		t.Fatalf("child: %s, %v; want blocked on its parent", j.State, err)
	}
	if rows, err := outbox.Refused(ctx, db, table, 0); err != nil || len(rows) != 0 {
		t.Fatalf("refused %+v (%v); want none", rows, err)
	}
}

// A job whose dependency reached Redis after the round judged it (here its
// dependency's row is behind it in the same batch) is sent again in that
// round: it is neither refused nor left for the next.
func TestOutboxSendsAgainAJobWhoseDependencyArrived(t *testing.T) {
	t.Parallel()
	db, b, table := outboxRig(t)
	ctx := context.Background()
	enqueueThroughOutbox(t, db, b, table, broker.Job{Queue: "ob", Kind: "k", ID: "child", DependsOn: []string{"parent"}},
		broker.Job{Queue: "ob", Kind: "k", ID: "parent"})
	if n, err := newRelay(t, db, b, table, 0).RelayOnce(ctx); n != 2 || err != nil {
		t.Fatalf("RelayOnce = %d, %v; want 2, nil", n, err)
	}
	if j, err := b.Inspector().Job(ctx, "ob", "child"); err != nil || j.State != broker.StateBlocked {
		t.Fatalf("child: %s, %v; want blocked on its parent", j.State, err)
	}
	var left int
	if err := db.QueryRow(`SELECT count(*) FROM "` + table + `"`).Scan(&left); err != nil || left != 0 {
		t.Fatalf("%d rows left in the outbox (%v), want 0", left, err)
	}
	if rows, err := outbox.Refused(ctx, db, table, 0); err != nil || len(rows) != 0 {
		t.Fatalf("refused %+v (%v); want none", rows, err)
	}
}

// recorder is a slog handler that passes each record on to a channel.
type recorder chan slog.Record

func (h recorder) Enabled(context.Context, slog.Level) bool { return true }
func (h recorder) Handle(_ context.Context, r slog.Record) error {
	select {
	case h <- r.Clone():
	default: // a full channel must not stall the pool
	}
	return nil
}
func (h recorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recorder) WithGroup(string) slog.Handler      { return h }

// A pool relaying the outbox warns once for each row it sets aside, with
// the row's id and reason, and goes on to the rows behind it.
func TestOutboxRefusedRowWarnedByPool(t *testing.T) {
	t.Parallel()
	db, b, table := outboxRig(t)
	ctx := context.Background()
	insertOutboxRow(t, db, table, "bad-options", "ob", `{"priority":"high"}`)
	enqueueThroughOutbox(t, db, b, table, broker.Job{Queue: "ob", Kind: "k", ID: "good"})
	ran := make(chan string, 1)
	h := handlers.HandlerFunc(func(_ context.Context, j *handlers.Job) error {
		ran <- j.ID
		return nil
	})
	logs := make(recorder, 1000)
	p, err := worker.New(b, h, worker.Config{Queues: []worker.Queue{{Name: "ob"}}, PollInterval: 20 * time.Millisecond,
		Outbox: newRelay(t, db, b, table, 1), Logger: slog.New(logs)})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer p.Shutdown(context.Background())
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the row behind the refused one never ran")
	}
	for {
		select {
		case r := <-logs:
			attrs := map[string]string{}
			r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
			if r.Level == slog.LevelWarn && attrs["id"] == "bad-options" && strings.Contains(attrs["reason"], "options") {
				return
			}
		case <-time.After(time.Second):
			t.Fatal("no warning names the refused row and its reason")
		}
	}
}

// Rows written by the versions before broker.Job had its JSON form (the
// options with the same names, written by hand here) relay as they were
// meant: an upgrade with rows in the table loses none of their fields.
func TestOutboxReadsRowsOfEarlierVersions(t *testing.T) {
	t.Parallel()
	db, b, table := outboxRig(t)
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "ob", Kind: "k", ID: "parent"}); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
	insertOutboxRow(t, db, table, "delayed", "ob", `{"max_attempts":3,"priority":2,"delay_ms":3600000,"unique_key":"u","unique_for_ms":7200000}`)
	insertOutboxRow(t, db, table, "at", "ob", fmt.Sprintf(`{"run_at_ms":%d}`, at.UnixMilli()))
	insertOutboxRow(t, db, table, "child", "ob", `{"depends_on":["parent"],"run_if_dependency_fails":true}`)
	if n, err := newRelay(t, db, b, table, 0).RelayOnce(ctx); n != 3 || err != nil {
		t.Fatalf("RelayOnce = %d, %v; want the 3 old rows relayed", n, err)
	}
	d, err := b.Inspector().Job(ctx, "ob", "delayed")
	if err != nil || d.State != broker.StateScheduled || d.MaxAttempts != 3 || d.Priority != 2 || time.Until(d.RunAt) < 50*time.Minute {
		t.Errorf("delayed: %+v, %v; want scheduled an hour ahead, 3 attempts, priority 2", d, err)
	}
	if a, err := b.Inspector().Job(ctx, "ob", "at"); err != nil || a.State != broker.StateScheduled || !a.RunAt.Equal(at) {
		t.Errorf("at: %s at %v, %v; want scheduled at %v", a.State, a.RunAt, err, at)
	}
	if c, err := b.Inspector().Job(ctx, "ob", "child"); err != nil || c.State != broker.StateBlocked {
		t.Errorf("child: %s, %v; want blocked by its parent", c.State, err)
	}
	// unique_for_ms holds the key past the job's end.
	if _, err := b.Inspector().Cancel(ctx, "ob", "delayed"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "ob", Kind: "k", UniqueKey: "u"}); !errors.Is(err, broker.ErrUniqueHeld) {
		t.Errorf("the key of the cancelled job is free: unique_for_ms was lost (%v)", err)
	}
	// The parent's failure policy came along: the child runs anyway.
	if _, err := b.Inspector().Cancel(ctx, "ob", "parent"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, err := b.Inspector().Job(ctx, "ob", "child")
		if err == nil && c.State == broker.StatePending {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("child: %s, %v after its parent was cancelled; want pending (run_if_dependency_fails)", c.State, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
