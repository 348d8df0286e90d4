package broker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// FootprintSamples is how many job hashes Footprint measures from each
// state's index: the newest ones, so that the figure follows what the
// queue's jobs look like now.
const FootprintSamples = 5

// Footprint is what one queue holds in Redis memory, by MEMORY USAGE.
type Footprint struct {
	// Measured is false when the server does not answer MEMORY USAGE ...
	// SAMPLES (miniredis has no real one; an ACL may deny it). Every byte
	// figure is then 0, and Unmeasured says why.
	Measured   bool
	Unmeasured string // why not measured; empty when Measured
	// Jobs counts the queue's jobs by state, from the indexes' lengths.
	Jobs map[State]int64
	// Sampled is how many job hashes were measured; PerState is their mean
	// size by state (a state without a sample is absent), and PerJob the
	// mean hash of the queue, each state weighted by its count: 0 when the
	// queue has no job.
	Sampled  int
	PerState map[State]int64 // bytes per job hash by state
	PerJob   int64           // bytes per job hash, weighted by state
	// IndexBytes is the state indexes (sorted sets) together, and
	// PerIndexEntry what one entry costs on average: a job costs PerJob in
	// its hash and PerIndexEntry in its index.
	IndexBytes    int64
	PerIndexEntry int64 // bytes per index entry
	// OtherBytes is the queue's other keys: sequence, limits, per-minute
	// stats, the event stream, the wake list.
	OtherBytes int64
	// Estimate is the queue's whole footprint: each state's jobs times that
	// state's mean hash size (the mean of all samples for a state whose
	// samples vanished while being read), plus IndexBytes and OtherBytes.
	Estimate int64
}

// TotalJobs is the sum of Jobs.
func (f Footprint) TotalJobs() int64 {
	var n int64
	for _, c := range f.Jobs {
		n += c
	}
	return n
}

// Footprint measures queue's memory: MEMORY USAGE (SAMPLES 0, exact) of up
// to FootprintSamples job hashes from each non-empty state index, and
// MEMORY USAGE (Redis's default sampling, O(1) in the key's length) of the
// queue's other keys. Two round trips to the node holding the queue; it
// writes nothing. A server without MEMORY USAGE is not an error: the
// answer says Measured false.
func (b *Inspector) Footprint(ctx context.Context, queue string) (Footprint, error) {
	if err := validName("queue", queue); err != nil {
		return Footprint{}, err
	}
	f, err := b.footprint(ctx, queue)
	if c, ok := b.rdb.(*redis.ClusterClient); ok && redis.HasErrorPrefix(err, "MOVED") {
		c.ReloadState(ctx) // a failover moved the slot: read the right node
		f, err = b.footprint(ctx, queue)
	}
	if err != nil {
		return Footprint{}, fmt.Errorf("fenceq: measure queue %q: %w", queue, err)
	}
	return f, nil
}

func (b *core) footprint(ctx context.Context, queue string) (Footprint, error) {
	k := b.queueKeys(queue)
	node, err := b.nodeFor(ctx, k.ready0())
	if err != nil {
		return Footprint{}, err
	}
	f := Footprint{Jobs: map[State]int64{}, PerState: map[State]int64{}}

	// First trip: each index's length, its newest ids, and every queue
	// key's size. SAMPLES 5 is Redis's default, said aloud so that a
	// server that cannot sample (miniredis) fails here and not later.
	isIndex := map[string]bool{}
	for _, s := range States {
		isIndex[k.index(s)] = true
	}
	for _, name := range pendingKeys {
		isIndex[k.key(name)] = true
	}
	cards := map[State]*redis.IntCmd{}
	newest := map[State]*redis.StringSliceCmd{}
	var pending func() int64
	sizes := make([]*redis.IntCmd, len(k.list))
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error { // each command's error is read below
		for _, s := range States {
			if s == StatePending {
				// The newest of priority 0, nearly every job: at ready0's head.
				pending = countPending(ctx, p, k)
				newest[s] = p.LRange(ctx, k.ready0(), 0, FootprintSamples-1)
				continue
			}
			cards[s] = p.ZCard(ctx, k.index(s))
			newest[s] = p.ZRange(ctx, k.index(s), -FootprintSamples, -1)
		}
		for i, key := range k.list {
			sizes[i] = p.MemoryUsage(ctx, key, 5)
		}
		return nil
	})
	for _, s := range States {
		if s == StatePending {
			f.Jobs[s] = pending()
			continue
		}
		n, err := cards[s].Result()
		if err != nil {
			return Footprint{}, fmt.Errorf("count %s jobs: %w", s, err)
		}
		f.Jobs[s] = n
	}
	for i, key := range k.list {
		n, err := sizes[i].Result()
		if why := unmeasured(err); why != "" {
			f.Unmeasured = why
			return f, nil
		}
		if err != nil && !errors.Is(err, redis.Nil) { // Nil: the key does not exist
			return Footprint{}, fmt.Errorf("memory usage of %s: %w", key, err)
		}
		if isIndex[key] {
			f.IndexBytes += n
		} else {
			f.OtherBytes += n
		}
	}

	// Second trip: the sampled job hashes, exactly. SAMPLES 0 reads a
	// whole hash, which for a job is a handful of fields.
	type sample struct {
		state State
		cmd   *redis.IntCmd
	}
	var samples []sample
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error { // each command's error is read below
		for _, s := range States {
			for _, id := range newest[s].Val() {
				samples = append(samples, sample{s, p.MemoryUsage(ctx, k.job+id, 0)})
			}
		}
		return nil
	})
	if len(samples) > 0 {
		if why := unmeasured(samples[0].cmd.Err()); why != "" {
			f.Unmeasured = why
			return f, nil
		}
	}
	sum, count := map[State]int64{}, map[State]int64{}
	var all int64
	for _, s := range samples {
		n, err := s.cmd.Result()
		if errors.Is(err, redis.Nil) {
			continue // settled and trimmed since the first trip
		}
		if err != nil {
			return Footprint{}, fmt.Errorf("memory usage of a %s job: %w", s.state, err)
		}
		sum[s.state] += n
		count[s.state]++
		all += n
		f.Sampled++
	}
	f.Measured = true
	var mean int64 // of every sample, for a state whose samples all vanished
	if f.Sampled > 0 {
		mean = all / int64(f.Sampled)
	}
	var hashes int64
	for _, s := range States {
		per := mean
		if count[s] > 0 {
			per = sum[s] / count[s]
			f.PerState[s] = per
		}
		hashes += f.Jobs[s] * per
	}
	f.Estimate = hashes + f.IndexBytes + f.OtherBytes
	if n := f.TotalJobs(); n > 0 {
		f.PerIndexEntry = f.IndexBytes / n
		if f.Sampled > 0 {
			f.PerJob = hashes / n
		}
	}
	return f, nil
}

// unmeasured answers why MEMORY USAGE failed in a way that means "this
// server cannot say" rather than "this read failed", or "" otherwise.
func unmeasured(err error) string {
	if err == nil || errors.Is(err, redis.Nil) {
		return ""
	}
	msg := err.Error()
	for _, s := range []string{"unknown command", "syntax error", "NOPERM", "not supported", "unknown subcommand"} {
		if strings.Contains(strings.ToLower(msg), strings.ToLower(s)) {
			return "the server does not answer MEMORY USAGE ... SAMPLES (" + msg + ")"
		}
	}
	return ""
}

// ServerMemory is what one Redis server reports of its memory (INFO
// memory).
type ServerMemory struct {
	Node   string // the server's address; a Cluster master's, or the client's
	Used   int64  // used_memory, bytes
	Max    int64  // maxmemory, bytes; 0 means no limit
	Policy string // maxmemory_policy
}

// ErrNoMemoryInfo says the server does not answer INFO memory (miniredis,
// or an ACL that denies INFO).
var ErrNoMemoryInfo = errors.New("fenceq: the Redis server does not report its memory (INFO memory)")

// ServerMemory reads INFO memory of every server that holds data: each
// master of a Cluster, or the one server. One round trip to each.
func (b *Inspector) ServerMemory(ctx context.Context) ([]ServerMemory, error) {
	c, ok := b.rdb.(*redis.ClusterClient)
	if !ok {
		m, err := readMemory(ctx, b.rdb, clientAddr(b.rdb))
		if err != nil {
			return nil, err
		}
		return []ServerMemory{m}, nil
	}
	var mu sync.Mutex
	var out []ServerMemory
	err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
		m, err := readMemory(ctx, n, n.Options().Addr)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		out = append(out, m)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(out, func(a, b ServerMemory) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// QueueMemory reads INFO memory of the server that holds queue.
func (b *Inspector) QueueMemory(ctx context.Context, queue string) (ServerMemory, error) {
	if err := validName("queue", queue); err != nil {
		return ServerMemory{}, err
	}
	key := b.queueKeys(queue).ready0()
	if c, ok := b.rdb.(*redis.ClusterClient); ok {
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return ServerMemory{}, fmt.Errorf("fenceq: find the cluster node of queue %q: %w", queue, err)
		}
		return readMemory(ctx, n, n.Options().Addr)
	}
	return readMemory(ctx, b.rdb, clientAddr(b.rdb))
}

func readMemory(ctx context.Context, c redis.Cmdable, node string) (ServerMemory, error) {
	info, err := c.Info(ctx, "memory").Result()
	if err != nil {
		if unmeasured(err) != "" {
			return ServerMemory{}, fmt.Errorf("%w: %v", ErrNoMemoryInfo, err)
		}
		return ServerMemory{}, fmt.Errorf("fenceq: read INFO memory of %s: %w", node, err)
	}
	m := ServerMemory{Node: node, Policy: infoField(info, "maxmemory_policy")}
	used, errUsed := strconv.ParseInt(infoField(info, "used_memory"), 10, 64)
	maxm, errMax := strconv.ParseInt(infoField(info, "maxmemory"), 10, 64)
	if errUsed != nil || errMax != nil {
		return ServerMemory{}, fmt.Errorf("%w: INFO memory of %s lacks used_memory or maxmemory", ErrNoMemoryInfo, node)
	}
	m.Used, m.Max = used, maxm
	return m, nil
}

func clientAddr(c redis.UniversalClient) string {
	if cl, ok := c.(*redis.Client); ok {
		return cl.Options().Addr
	}
	return ""
}
