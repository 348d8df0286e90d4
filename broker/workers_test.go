package broker_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

type registrySetup struct {
	mr  *miniredis.Miniredis
	rdb *redis.Client
	b   *broker.Broker
}

func newRegistrySetup(t *testing.T) registrySetup {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{Prefix: "p"})
	if err != nil {
		t.Fatal(err)
	}
	return registrySetup{mr, rdb, b}
}

func (s registrySetup) register(t *testing.T, id string, ttl time.Duration) *broker.WorkerRegistration {
	t.Helper()
	r, err := s.b.Leases().RegisterWorker(broker.WorkerInfo{ID: id, Host: "h", PID: 7, Version: "v1",
		Queues: []string{"a", "b"}, Concurrency: 4}, ttl)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (s registrySetup) workers(t *testing.T) broker.WorkerList {
	t.Helper()
	ws, err := s.b.Inspector().Workers(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func (s registrySetup) index(t *testing.T) []string {
	t.Helper()
	ids, err := s.rdb.ZRange(context.Background(), "p:workers:{workers}:index", 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A registered pool is listed with what it said and the jobs it runs,
// with times on the Redis clock, until it removes its entry.
func TestWorkerRegistryLists(t *testing.T) {
	s := newRegistrySetup(t)
	ctx := context.Background()
	redisNow := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s.mr.SetTime(redisNow)
	r := s.register(t, "w1", time.Minute)
	since := redisNow.Add(-time.Minute)
	if err := r.Refresh(ctx, []broker.RunningJob{{Queue: "a", ID: "j1", Generation: 3, Since: since}}); err != nil {
		t.Fatal(err)
	}
	ws := s.workers(t)
	if len(ws.Workers) != 1 {
		t.Fatalf("listed %d workers, want 1", len(ws.Workers))
	}
	if !ws.Now.Equal(redisNow) {
		t.Errorf("the listing's clock is %v, Redis's %v", ws.Now, redisNow)
	}
	w := ws.Workers[0]
	if w.ID != "w1" || w.Host != "h" || w.PID != 7 || w.Version != "v1" || !slices.Equal(w.Queues, []string{"a", "b"}) ||
		w.QueueCount != 2 || w.Concurrency != 4 || w.Running != 1 || len(w.Jobs) != 1 {
		t.Fatalf("listed %+v", w)
	}
	if d := w.SeenAt.Sub(redisNow); d < 0 || d > 5*time.Second {
		t.Errorf("seen at %v, Redis says %v", w.SeenAt, redisNow)
	}
	if w.ExpiresAt.Sub(w.SeenAt) != time.Minute || !w.StartedAt.Equal(w.SeenAt) {
		t.Errorf("started %v, seen %v, expires %v", w.StartedAt, w.SeenAt, w.ExpiresAt)
	}
	if !w.Jobs[0].Since.Equal(since) {
		t.Errorf("job since %v, want %v", w.Jobs[0].Since, since)
	}

	if _, j, ok := ws.Holder("a", "j1", 3); !ok || j.ID != "j1" {
		t.Errorf("Holder(a, j1, 3) = %v, %v", j, ok)
	}
	if _, _, ok := ws.Holder("a", "j1", 2); ok {
		t.Error("Holder found an older generation's lease")
	}
	if _, _, ok := ws.Holder("b", "j1", 0); ok {
		t.Error("Holder found a job of another queue")
	}
	w2, _, ok, err := s.b.Inspector().JobHolder(ctx, "a", "j1", 0)
	if err != nil || !ok || w2.ID != "w1" {
		t.Errorf("JobHolder = %v, %v, %v", w2.ID, ok, err)
	}

	// Later refreshes keep the start, and the jobs follow the pool. A
	// refresh learns the Redis clock for the next one: the second after
	// a jump of the clock shows it.
	s.mr.SetTime(redisNow.Add(10 * time.Second))
	for range 2 {
		if err := r.Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	w = s.workers(t).Workers[0]
	if w.Running != 0 || len(w.Jobs) != 0 || !w.StartedAt.Equal(ws.Workers[0].StartedAt) || !w.SeenAt.After(ws.Workers[0].SeenAt) {
		t.Errorf("after a refresh: %+v", w)
	}

	if err := r.Remove(ctx); err != nil {
		t.Fatal(err)
	}
	if ws := s.workers(t); len(ws.Workers) != 0 {
		t.Errorf("removed, still listed: %+v", ws)
	}
	if keys := s.mr.Keys(); len(keys) != 0 {
		t.Errorf("removed, keys left: %q", keys)
	}
}

// A pool that dies (no Remove) leaves the list when its TTL has passed,
// and the index does not keep it: a listing drops it, and so does any
// other pool's refresh a TTL later.
func TestWorkerRegistryExpires(t *testing.T) {
	s := newRegistrySetup(t)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s.mr.SetTime(t0)
	dead := s.register(t, "dead", 10*time.Second)
	if err := dead.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	s.mr.FastForward(11 * time.Second)     // the TTLs
	s.mr.SetTime(t0.Add(11 * time.Second)) // and the clock
	if ws := s.workers(t); len(ws.Workers) != 0 {
		t.Fatalf("expired, still listed: %+v", ws)
	}
	if ids := s.index(t); len(ids) != 0 {
		t.Errorf("a listing left %q in the index", ids)
	}

	// Nobody lists: the next refresh of another pool drops the dead one.
	for i := range 20 {
		r := s.register(t, fmt.Sprint("gone", i), 10*time.Second)
		if err := r.Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	s.mr.FastForward(time.Minute)
	s.mr.SetTime(t0.Add(time.Minute))
	live := s.register(t, "live", 10*time.Second)
	if err := live.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	if ids := s.index(t); !slices.Equal(ids, []string{"live"}) {
		t.Errorf("after a refresh a TTL later the index holds %q, want [live]", ids)
	}
}

// An entry is bounded whatever the pool runs, and a refresh costs the
// same commands with no job as with thousands.
func TestWorkerRegistryBounds(t *testing.T) {
	s := newRegistrySetup(t)
	ctx := context.Background()
	queues := make([]string, 80)
	for i := range queues {
		queues[i] = fmt.Sprint("q", i)
	}
	r, err := s.b.Leases().RegisterWorker(broker.WorkerInfo{ID: "w", Host: strings.Repeat("h", 1000), Queues: queues}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var running []broker.RunningJob
	for i := range 5000 {
		running = append(running, broker.RunningJob{Queue: "q1", ID: fmt.Sprintf("j%04d", i), Since: base.Add(time.Duration(5000-i) * time.Second)})
	}
	if err := r.Refresh(ctx, nil); err != nil { // reads the clock once
		t.Fatal(err)
	}
	before := s.mr.CommandCount()
	if err := r.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	idle := s.mr.CommandCount() - before
	before = s.mr.CommandCount()
	if err := r.Refresh(ctx, running); err != nil {
		t.Fatal(err)
	}
	if busy := s.mr.CommandCount() - before; busy != idle || idle != 4 {
		t.Errorf("a refresh ran %d commands with no job and %d with 5,000; want 4 each", idle, busy)
	}
	w := s.workers(t).Workers[0]
	if w.Running != 5000 || len(w.Jobs) != broker.MaxWorkerJobs {
		t.Errorf("running %d, listed %d; want 5000 and %d", w.Running, len(w.Jobs), broker.MaxWorkerJobs)
	}
	if w.Jobs[0].ID != "j4999" { // the longest-running first
		t.Errorf("first listed %q, want the longest-running, j4999", w.Jobs[0].ID)
	}
	if len(w.Queues) != broker.MaxWorkerQueues || w.QueueCount != 80 || len(w.Host) != 255 {
		t.Errorf("queues %d of %d, host %d bytes", len(w.Queues), w.QueueCount, len(w.Host))
	}

	// Long ids: the listing stops at 32 KiB of them.
	var long []broker.RunningJob
	for i := range 100 {
		long = append(long, broker.RunningJob{Queue: "q", ID: fmt.Sprintf("%04d", i) + strings.Repeat("x", 1020), Since: base})
	}
	if err := r.Refresh(ctx, long); err != nil {
		t.Fatal(err)
	}
	if w := s.workers(t).Workers[0]; len(w.Jobs) >= 40 || len(w.Jobs) < 20 || w.Running != 100 {
		t.Errorf("1 KiB ids: %d listed of %d", len(w.Jobs), w.Running)
	}
	if v, _ := s.rdb.Get(ctx, "p:workers:{workers}:pool:w").Result(); len(v) > 40<<10 {
		t.Errorf("the entry is %d bytes", len(v))
	}
}

// RegisterWorker refuses what would not make a bounded entry.
func TestWorkerRegistryRefuses(t *testing.T) {
	s := newRegistrySetup(t)
	for _, c := range []struct {
		info broker.WorkerInfo
		ttl  time.Duration
		want string
	}{
		{broker.WorkerInfo{}, time.Minute, "worker id"},
		{broker.WorkerInfo{ID: strings.Repeat("i", 65)}, time.Minute, "worker id"},
		{broker.WorkerInfo{ID: "a\nb"}, time.Minute, "worker id"},
		{broker.WorkerInfo{ID: "w"}, time.Millisecond, "worker ttl"},
		{broker.WorkerInfo{ID: "w", Name: strings.Repeat("n", 201)}, time.Minute, "worker name"},
		{broker.WorkerInfo{ID: "w", Name: "a\x00"}, time.Minute, "worker name"},
	} {
		_, err := s.b.Leases().RegisterWorker(c.info, c.ttl)
		if !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("RegisterWorker(%+v, %v) = %v, want an invalid %s", c.info, c.ttl, err, c.want)
		}
	}
}

// A damaged entry is left out of the listing, not an error, and an entry
// larger than Refresh writes is read as bounded as Refresh writes it.
func TestWorkerRegistryDamagedEntry(t *testing.T) {
	s := newRegistrySetup(t)
	ctx := context.Background()
	r := s.register(t, "w1", time.Minute)
	if err := r.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	far := float64(time.Now().Add(time.Hour).UnixMilli())
	s.rdb.ZAdd(ctx, "p:workers:{workers}:index", redis.Z{Score: far, Member: "bad"}, redis.Z{Score: far, Member: "huge"},
		redis.Z{Score: far, Member: "wide"}, redis.Z{Score: far, Member: "other"})
	s.rdb.Set(ctx, "p:workers:{workers}:pool:bad", "{not json", time.Minute)
	// Written by something else than Refresh: too large, too many jobs,
	// another pool's id.
	s.rdb.Set(ctx, "p:workers:{workers}:pool:huge", `{"id":"huge","host":"`+strings.Repeat("h", 300<<10)+`"}`, time.Minute)
	wide := `{"id":"wide","host":"h","queues":[` + strings.TrimSuffix(strings.Repeat(`"q",`, 500), ",") + `],"jobs":[` +
		strings.TrimSuffix(strings.Repeat(`{"queue":"q","id":"j"},`, 5000), ",") + `]}`
	s.rdb.Set(ctx, "p:workers:{workers}:pool:wide", wide, time.Minute)
	s.rdb.Set(ctx, "p:workers:{workers}:pool:other", `{"id":"w1"}`, time.Minute)
	ws := s.workers(t).Workers
	if len(ws) != 2 || ws[0].ID != "w1" && ws[1].ID != "w1" {
		t.Fatalf("listed %+v", ws)
	}
	for _, w := range ws {
		if w.ID == "wide" && (len(w.Jobs) != broker.MaxWorkerJobs || len(w.Queues) != broker.MaxWorkerQueues) {
			t.Errorf("an entry of 5,000 jobs and 500 queues is read with %d and %d", len(w.Jobs), len(w.Queues))
		}
	}
}

// A listing that finds an entry gone drops only the members whose expiry
// has passed as the index holds it now: a pool that refreshed between the
// listing's reads (back from a stall, its entry written again) keeps its
// place, where a removal by id would hide it until its next refresh.
func TestWorkerRegistryListingSparesARefresh(t *testing.T) {
	s := newRegistrySetup(t)
	ctx := context.Background()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	s.mr.SetTime(t0)
	dead := s.register(t, "dead", 10*time.Second)
	if err := dead.Refresh(ctx, nil); err != nil {
		t.Fatal(err)
	}
	s.mr.FastForward(11 * time.Second)
	s.mr.SetTime(t0.Add(11 * time.Second))
	// "back" was read by the listing with its entry missing, and has
	// refreshed since: its score is in the future, its entry not yet seen.
	s.rdb.ZAdd(ctx, "p:workers:{workers}:index", redis.Z{Score: float64(t0.Add(time.Minute).UnixMilli()), Member: "back"})
	if ws := s.workers(t); len(ws.Workers) != 0 {
		t.Fatalf("listed %+v", ws)
	}
	if ids := s.index(t); !slices.Equal(ids, []string{"back"}) {
		t.Errorf("the index holds %q after the listing, want [back]: a refreshed pool was dropped, or an expired one kept", ids)
	}
}

// A listing reads at most MaxWorkersListed pools, however many the index
// holds.
func TestWorkerRegistryManyPools(t *testing.T) {
	s := newRegistrySetup(t)
	ctx := context.Background()
	for i := range broker.MaxWorkersListed + 200 {
		if err := s.register(t, fmt.Sprintf("w%05d", i), time.Minute).Refresh(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	ws := s.workers(t)
	if len(ws.Workers) != broker.MaxWorkersListed {
		t.Errorf("listed %d pools, want %d", len(ws.Workers), broker.MaxWorkersListed)
	}
	// The listing says it is not all of them. (It did not: workerd
	// workers said "1000 live pool(s)" of 1,200.)
	if ws.Indexed != broker.MaxWorkersListed+200 || !ws.Truncated() {
		t.Errorf("the listing says the index holds %d (truncated %v), want %d", ws.Indexed, ws.Truncated(), broker.MaxWorkersListed+200)
	}
}

// A listing of fewer pools than MaxWorkersListed is all of them.
func TestWorkerRegistryListingComplete(t *testing.T) {
	s := newRegistrySetup(t)
	if err := s.register(t, "w1", time.Minute).Refresh(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if ws := s.workers(t); len(ws.Workers) != 1 || ws.Indexed != 1 || ws.Truncated() {
		t.Errorf("%+v: indexed %d truncated %v", ws.Workers, ws.Indexed, ws.Truncated())
	}
}

// An entry written by something else than Refresh, under the size a
// listing decodes, is read as bounded as Refresh writes it: its host,
// name, version, queue names and job ids clipped, its counts not
// negative. (A host of 200 KiB was listed whole: a thousand such entries
// made a workers page of 200 MB.)
func TestWorkerRegistryJunkEntryClipped(t *testing.T) {
	s := newRegistrySetup(t)
	ctx := context.Background()
	far := float64(time.Now().Add(time.Hour).UnixMilli())
	s.rdb.ZAdd(ctx, "p:workers:{workers}:index", redis.Z{Score: far, Member: "junk"})
	long := func(n int) string { return strings.Repeat("é", n/2) }
	jobs := make([]string, 100)
	for i := range jobs {
		jobs[i] = fmt.Sprintf(`{"queue":%q,"id":%q}`, long(300), fmt.Sprint(i, long(500)))
	}
	entry := fmt.Sprintf(`{"id":"junk","host":%q,"name":%q,"version":%q,"queues":[%q],"jobs":[%s],"running":-5,"concurrency":-3,"queue_count":-1,"pid":-1}`,
		long(100<<10), long(10<<10), long(10<<10), long(5000), strings.Join(jobs, ","))
	s.rdb.Set(ctx, "p:workers:{workers}:pool:junk", entry, time.Minute)
	ws := s.workers(t).Workers
	if len(ws) != 1 {
		t.Fatalf("listed %d", len(ws))
	}
	w := ws[0]
	ids := 0
	for _, j := range w.Jobs {
		ids += len(j.ID) + len(j.Queue)
		if len(j.Queue) > 200 || len(j.ID) > 1024 {
			t.Errorf("a job of %d and %d bytes", len(j.Queue), len(j.ID))
		}
	}
	if len(w.Host) > 255 || len(w.Name) > 200 || len(w.Version) > 100 || len(w.Queues[0]) > 200 || ids > 32<<10 ||
		w.Running < 0 || w.Concurrency < 0 || w.QueueCount < len(w.Queues) || !utf8.ValidString(w.Host) {
		t.Errorf("read as: host %d bytes, name %d, version %d, queue %d, job ids %d, running %d, concurrency %d, queue count %d",
			len(w.Host), len(w.Name), len(w.Version), len(w.Queues[0]), ids, w.Running, w.Concurrency, w.QueueCount)
	}
}
