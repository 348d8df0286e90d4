package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"
)

// The live worker registry: every worker.Pool keeps one entry, which says
// who it is and what it runs, and which expires unless the pool refreshes
// it. Its keys share one hash tag of their own, so that on Redis Cluster a
// refresh and a listing each touch one slot:
//
//	<prefix>:workers:{workers}:index       ZSET   pool id → when its entry
//	                                              expires (ms, Redis clock)
//	<prefix>:workers:{workers}:pool:<id>   STRING the entry, JSON; expires
//	                                              with the pool's TTL
//
// The entry's own TTL says whether a pool is live; the index only finds
// the entries. A refresh drops from the index the pools whose entry
// expired a TTL ago or more, and a listing those whose entry is gone, so
// the index holds the live pools and the recently dead, never every pool
// that ever ran.

// Bounds of the registry.
const (
	// MaxWorkerJobs bounds the running jobs one entry lists: a pool that
	// runs more lists its longest-running MaxWorkerJobs, and its Running
	// count says how many it runs in all.
	MaxWorkerJobs = 100
	// MaxWorkerQueues bounds the queue names one entry lists; QueueCount
	// says how many the pool serves.
	MaxWorkerQueues = 50
	// MaxWorkersListed bounds the pools Workers reads: the first this many
	// of the index, soonest to expire first.
	MaxWorkersListed = 1000
	// maxWorkerEntryIDBytes bounds the bytes of job ids one entry lists,
	// whatever their count (an id may be 1 KiB).
	maxWorkerEntryIDBytes = 32 << 10
	maxHostBytes          = 255
	// workersReadStep is how many entries one MGET of a listing reads.
	workersReadStep = 100
	// maxWorkerEntryBytes is the largest entry a listing decodes: what
	// Refresh writes is under 45 KiB, so a larger one was written by
	// something else and is left out.
	maxWorkerEntryBytes = 256 << 10
)

// WorkerInfo is one pool's entry in the live worker registry. The times
// are on the Redis server's clock (as the pool last learnt it), for
// display.
type WorkerInfo struct {
	ID          string       `json:"id"`             // the pool's id, new at every start
	Name        string       `json:"name,omitempty"` // the pool's label (worker.Config.Name), if any
	Host        string       `json:"host"`           // the machine's host name
	PID         int          `json:"pid"`            // the process id
	Version     string       `json:"version"`        // the fenceq version the process runs
	Queues      []string     `json:"queues"`         // the queues it serves, the first MaxWorkerQueues
	QueueCount  int          `json:"queue_count"`    // how many queues it serves in all
	Concurrency int          `json:"concurrency"`    // its slots
	Running     int          `json:"running"`        // the jobs it runs, all of them
	Jobs        []RunningJob `json:"jobs"`           // the longest-running of them, at most MaxWorkerJobs
	StartedAt   time.Time    `json:"started_at"`     // when the pool registered first
	SeenAt      time.Time    `json:"seen_at"`        // its last refresh
	ExpiresAt   time.Time    `json:"expires_at"`     // when its entry goes unless refreshed
	Stopping    bool         `json:"stopping"`       // the pool is shutting down: it claims nothing more
}

// RunningJob is one job a pool runs, as its registry entry lists it.
type RunningJob struct {
	Queue      string    `json:"queue"`
	ID         string    `json:"id"`
	Generation int64     `json:"generation"` // the claim's generation: the lease it holds
	Since      time.Time `json:"since"`      // when it was claimed, Redis clock
}

// WorkerList is the registry as Workers read it.
type WorkerList struct {
	Workers []WorkerInfo // the live pools, by host, pid and start
	Now     time.Time    // the Redis clock when they were read, for their ages
	// Indexed is how many pools the registry's index held when read: the
	// live ones and those whose entry expired lately. Above
	// MaxWorkersListed, Workers lists only the first MaxWorkersListed of
	// them (Truncated).
	Indexed int64
}

// Truncated says the index held more pools than a listing reads: Workers
// is not every live pool (and Holder may miss one).
func (l WorkerList) Truncated() bool { return l.Indexed > MaxWorkersListed }

// Holder answers the pool that lists job id of queue as running, and the
// entry for it. A generation above 0 must match the entry's: a pool whose
// lease was reaped may still list the job until its next refresh. Given 0,
// the entry of the highest generation wins.
func (l WorkerList) Holder(queue, id string, gen int64) (WorkerInfo, RunningJob, bool) {
	var best WorkerInfo
	var job RunningJob
	found := false
	for _, w := range l.Workers {
		for _, j := range w.Jobs {
			if j.Queue != queue || j.ID != id || gen > 0 && j.Generation != gen {
				continue
			}
			if !found || j.Generation > job.Generation {
				best, job, found = w, j, true
			}
		}
	}
	return best, job, found
}

func (b *core) workersBase() string        { return b.opts.Prefix + ":workers:{workers}:" }
func (b *core) workersIndex() string       { return b.workersBase() + "index" }
func (b *core) workerKey(id string) string { return b.workersBase() + "pool:" + id }

// WorkerRegistration is one pool's entry in the registry, kept by the pool
// (Refresh at an interval, Remove at shutdown). It learns the Redis clock
// from each refresh and counts on the local monotonic clock in between,
// so its times never come from the local wall clock. Safe for concurrent
// use.
type WorkerRegistration struct {
	b   *core
	ttl time.Duration

	mu       sync.Mutex
	info     WorkerInfo
	redisAt  time.Time // the Redis clock, as last read
	localAt  time.Time // the local monotonic clock when it was read
	hasClock bool
}

// RegisterWorker prepares info's entry, to expire ttl after each refresh.
// It does not contact Redis: Refresh writes the entry. The entry's ID,
// Host, Name and Version are bounded here; Queues, Jobs and the times are
// set by Refresh.
func (b *Leases) RegisterWorker(info WorkerInfo, ttl time.Duration) (*WorkerRegistration, error) {
	switch {
	case info.ID == "" || len(info.ID) > 64 || strings.ContainsFunc(info.ID, isControl):
		return nil, &ValidationError{Field: "worker id", Value: short(info.ID), Reason: "must be 1 to 64 bytes with no control characters"}
	case ttl < 10*time.Millisecond:
		return nil, &ValidationError{Field: "worker ttl", Value: ttl.String(), Reason: "must be at least 10ms"}
	}
	if info.Name != "" {
		if err := ValidateWorkerName(info.Name); err != nil {
			return nil, err
		}
	}
	info.Host = clipBytes(info.Host, maxHostBytes)
	info.Version = clipBytes(info.Version, 100)
	info.QueueCount = len(info.Queues)
	info.Queues = slices.Clone(info.Queues[:min(len(info.Queues), MaxWorkerQueues)])
	return &WorkerRegistration{b: b.core, ttl: ttl, info: info}, nil
}

// ValidateWorkerName answers the *ValidationError RegisterWorker would
// for a pool labelled name: at most 200 bytes of UTF-8, no control
// characters.
func ValidateWorkerName(name string) error { return validName("worker name", name) }

// clipBytes shortens s to at most n bytes, on a rune boundary.
func clipBytes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// SetStopping marks the entry as the entry of a pool that is shutting
// down, from the next Refresh on.
func (r *WorkerRegistration) SetStopping() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.info.Stopping = true
}

// Info is the entry as last written (or prepared).
func (r *WorkerRegistration) Info() WorkerInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info
}

// Refresh writes the entry with the jobs running now (the pool's own
// count of them is len(running)) and renews its TTL. It is one round trip
// of four commands whatever the jobs (the first refresh reads the Redis
// clock first: one more), and it drops from the index the entries that
// expired a TTL ago or more.
func (r *WorkerRegistration) Refresh(ctx context.Context, running []RunningJob) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.hasClock {
		t, err := r.b.rdb.Time(ctx).Result()
		if err != nil {
			return fmt.Errorf("fenceq: register worker: read the Redis clock: %w", err)
		}
		r.setClock(t)
	}
	now := r.redisAt.Add(time.Since(r.localAt)).Truncate(time.Millisecond)
	info := r.info
	if info.StartedAt.IsZero() {
		info.StartedAt = now
	}
	info.SeenAt, info.ExpiresAt = now, now.Add(r.ttl)
	info.Running = len(running)
	info.Jobs = listedJobs(running)
	entry, err := json.Marshal(info)
	if err != nil {
		return fmt.Errorf("fenceq: register worker: %w", err)
	}
	var clock *redis.TimeCmd
	_, err = r.b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, r.b.workerKey(info.ID), entry, r.ttl)
		p.ZAdd(ctx, r.b.workersIndex(), redis.Z{Score: float64(info.ExpiresAt.UnixMilli()), Member: info.ID})
		p.ZRemRangeByScore(ctx, r.b.workersIndex(), "-inf", fmt.Sprint(now.Add(-r.ttl).UnixMilli()))
		clock = p.Time(ctx)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fenceq: refresh the worker registry: %w", err)
	}
	if t, err := clock.Result(); err == nil {
		r.setClock(t)
	}
	r.info = info
	return nil
}

func (r *WorkerRegistration) setClock(t time.Time) {
	r.redisAt, r.localAt, r.hasClock = t, time.Now(), true
}

// listedJobs is what an entry lists of running: the longest-running
// first, at most MaxWorkerJobs and maxWorkerEntryIDBytes of ids.
func listedJobs(running []RunningJob) []RunningJob {
	jobs := slices.Clone(running)
	slices.SortFunc(jobs, func(a, b RunningJob) int {
		return cmp.Or(a.Since.Compare(b.Since), strings.Compare(a.Queue, b.Queue), strings.Compare(a.ID, b.ID))
	})
	bytes := 0
	for i, j := range jobs {
		bytes += len(j.ID) + len(j.Queue)
		if i == MaxWorkerJobs || bytes > maxWorkerEntryIDBytes {
			return jobs[:i]
		}
	}
	return jobs
}

// Remove deletes the entry: the pool has stopped. An entry not removed
// (the process died) expires with its TTL.
func (r *WorkerRegistration) Remove(ctx context.Context) error {
	id := r.Info().ID
	_, err := r.b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, r.b.workerKey(id))
		p.ZRem(ctx, r.b.workersIndex(), id)
		return nil
	})
	if err != nil {
		return fmt.Errorf("fenceq: remove the worker's registry entry: %w", err)
	}
	return nil
}

// Workers lists the live pools of the registry (at most MaxWorkersListed:
// WorkerList.Truncated says when there were more), by host, pid and start.
// It reads the index once and the entries in steps
// of 100; when an entry has expired, it drops from the index the pools
// whose expiry has passed. An entry that does not decode, or is larger
// than any Refresh writes, is left out (it expires like any other).
func (in *Inspector) Workers(ctx context.Context) (WorkerList, error) {
	node, err := in.nodeFor(ctx, in.workersIndex())
	if err != nil {
		return WorkerList{}, err
	}
	var idx *redis.StringSliceCmd
	var clock *redis.TimeCmd
	var card *redis.IntCmd
	if _, err := node.Pipelined(ctx, func(p redis.Pipeliner) error {
		idx = p.ZRange(ctx, in.workersIndex(), 0, MaxWorkersListed-1)
		card = p.ZCard(ctx, in.workersIndex())
		clock = p.Time(ctx)
		return nil
	}); err != nil {
		return WorkerList{}, fmt.Errorf("fenceq: list workers: %w", err)
	}
	ids, now := idx.Val(), clock.Val()
	var out []WorkerInfo
	gone := false
	for chunk := range slices.Chunk(ids, workersReadStep) {
		keys := make([]string, len(chunk))
		for i, id := range chunk {
			keys[i] = in.workerKey(id)
		}
		vals, err := in.rdb.MGet(ctx, keys...).Result()
		if err != nil {
			return WorkerList{}, fmt.Errorf("fenceq: list workers: %w", err)
		}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				gone = true
				continue
			}
			var w WorkerInfo
			if len(s) > maxWorkerEntryBytes || json.Unmarshal([]byte(s), &w) != nil || w.ID != chunk[i] {
				continue
			}
			out = append(out, boundedEntry(w))
		}
	}
	if gone {
		// Some entries have expired: drop the members whose expiry has
		// passed, by their score as it is now, not as it was read. A pool
		// that refreshed since the MGET (back from a stall) has a new
		// score and stays; removing it by id would hide a live pool until
		// its next refresh.
		_ = node.ZRemRangeByScore(ctx, in.workersIndex(), "-inf", fmt.Sprint(now.UnixMilli())).Err()
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int {
		return cmp.Or(strings.Compare(a.Host, b.Host), cmp.Compare(a.PID, b.PID), a.StartedAt.Compare(b.StartedAt), strings.Compare(a.ID, b.ID))
	})
	return WorkerList{Workers: out, Now: now, Indexed: card.Val()}, nil
}

// boundedEntry is w, as a listing decoded it, as bounded as Refresh
// writes it: an entry written by something else (by hand, or by a
// version with other bounds) is clipped, so a page or a table of a
// thousand entries stays the size of a thousand entries Refresh wrote.
func boundedEntry(w WorkerInfo) WorkerInfo {
	w.Host = strings.ToValidUTF8(clipBytes(w.Host, maxHostBytes), "?")
	w.Name = strings.ToValidUTF8(clipBytes(w.Name, maxNameBytes), "?")
	w.Version = strings.ToValidUTF8(clipBytes(w.Version, 100), "?")
	w.Running, w.Concurrency, w.QueueCount = max(w.Running, 0), max(w.Concurrency, 0), max(w.QueueCount, 0)
	w.Queues = slices.Clone(w.Queues[:min(len(w.Queues), MaxWorkerQueues)])
	for i, q := range w.Queues {
		w.Queues[i] = clipBytes(q, maxNameBytes)
	}
	w.QueueCount = max(w.QueueCount, len(w.Queues))
	for i := range w.Jobs {
		w.Jobs[i].Queue = clipBytes(w.Jobs[i].Queue, maxNameBytes)
		w.Jobs[i].ID = clipBytes(w.Jobs[i].ID, maxIDBytes)
	}
	w.Jobs = listedJobs(w.Jobs)
	return w
}

// JobHolder answers the live pool that lists job id of queue as running
// under generation gen (0: any), from the registry: false when none does
// (the job is not running, its pool's entry expired, or its pool runs more
// than MaxWorkerJobs jobs and lists others).
func (in *Inspector) JobHolder(ctx context.Context, queue, id string, gen int64) (WorkerInfo, RunningJob, bool, error) {
	if err := validID(queue, id); err != nil {
		return WorkerInfo{}, RunningJob{}, false, err
	}
	ws, err := in.Workers(ctx)
	if err != nil {
		return WorkerInfo{}, RunningJob{}, false, err
	}
	w, j, ok := ws.Holder(queue, id, gen)
	return w, j, ok, nil
}
