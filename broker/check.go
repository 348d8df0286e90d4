package broker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Inconsistency is one violation of invariant 6 found by Check.
type Inconsistency struct {
	ID      string // the job's id, as found in an index or a hash
	Problem string // what is wrong, e.g. the index it is in and the state it has
}

func (i Inconsistency) String() string { return i.ID + ": " + i.Problem }

// Check verifies invariant 6 on a live Redis: every job hash of queue is in
// exactly the index that matches its state, every index entry has a job hash
// in that state, and each running job's lease score equals its lease_until.
// It reads the whole queue (indexes in memory, job keys by SCAN), so it costs
// O(jobs); it writes nothing. Jobs that move while it runs can show up as
// false positives: run it again before acting on one.
func (b *Broker) Check(ctx context.Context, queue string) ([]Inconsistency, error) {
	if err := validName("queue", queue); err != nil {
		return nil, err
	}
	out, err := b.check(ctx, queue)
	if c, ok := b.rdb.(*redis.ClusterClient); ok && redis.HasErrorPrefix(err, "MOVED") {
		// A failover moved the slot since go-redis last looked: refresh
		// its slot map and read the right node.
		c.ReloadState(ctx)
		out, err = b.check(ctx, queue)
	}
	return out, err
}

func (b *Broker) check(ctx context.Context, queue string) ([]Inconsistency, error) {
	k := b.queueKeys(queue)
	node, err := b.nodeFor(ctx, k.key("ready"))
	if err != nil {
		return nil, err
	}

	// Where each id is listed, and with what score.
	listed := map[string][]State{}
	leaseScore := map[string]int64{}
	for _, s := range States {
		zs, err := node.ZRangeWithScores(ctx, k.index(s), 0, -1).Result()
		if err != nil {
			return nil, fmt.Errorf("fenceq: check queue %q: read %s index: %w", queue, s, err)
		}
		for _, z := range zs {
			id := z.Member.(string)
			listed[id] = append(listed[id], s)
			if s == StateRunning {
				leaseScore[id] = int64(z.Score)
			}
		}
	}

	var out []Inconsistency
	add := func(id, format string, args ...any) {
		out = append(out, Inconsistency{ID: id, Problem: fmt.Sprintf(format, args...)})
	}
	seen := map[string]bool{}
	var blocked []string
	var cursor uint64
	pattern := globEscape(k.job) + "*"
	for {
		keys, next, err := node.Scan(ctx, cursor, pattern, 500).Result()
		if err != nil {
			return nil, fmt.Errorf("fenceq: check queue %q: scan job keys: %w", queue, err)
		}
		cmds := make([]*redis.SliceCmd, len(keys))
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, key := range keys {
				cmds[i] = p.HMGet(ctx, key, "state", "lease_until")
			}
			return nil
		})
		for i, key := range keys {
			id := strings.TrimPrefix(key, k.job)
			if seen[id] {
				continue // SCAN may return a key twice
			}
			seen[id] = true
			vals, err := cmds[i].Result()
			if err != nil {
				add(id, "job hash unreadable: %v", err)
				continue
			}
			state, _ := vals[0].(string)
			where := listed[id]
			switch {
			case !State(state).valid():
				add(id, "job hash has state %q, which is not a state", state)
			case len(where) == 0:
				add(id, "job is %s but in no index (want %s)", state, k.index(State(state)))
			case len(where) > 1:
				add(id, "job is %s but listed in %d indexes: %v", state, len(where), where)
			case where[0] != State(state):
				add(id, "job is %s but listed in the %s index", state, where[0])
			case state == string(StateRunning):
				until, _ := vals[1].(string)
				if until != fmt.Sprint(leaseScore[id]) {
					add(id, "lease_until is %q but the leases index says %d", until, leaseScore[id])
				}
			case state == string(StateBlocked):
				blocked = append(blocked, id)
			}
		}
		cursor = next
		if cursor == 0 {
			break
		}
	}
	for id, where := range listed {
		if !seen[id] {
			add(id, "listed in %v but the job hash does not exist", where)
		}
	}
	for _, id := range blocked {
		stuck, err := b.stuck(ctx, node, k, id)
		if err != nil {
			return nil, fmt.Errorf("fenceq: check queue %q: %w", queue, err)
		}
		if stuck != "" {
			add(id, "%s", stuck)
		}
	}
	slices.SortFunc(out, func(a, b Inconsistency) int { return strings.Compare(a.ID+a.Problem, b.ID+b.Problem) })
	return out, nil
}

// nodeFor answers the client that serves key: on a Cluster, its master, so
// SCAN walks the right node; otherwise the client itself.
func (b *Broker) nodeFor(ctx context.Context, key string) (redis.Cmdable, error) {
	if c, ok := b.rdb.(*redis.ClusterClient); ok {
		n, err := c.MasterForKey(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("fenceq: find the cluster node of %q: %w", key, err)
		}
		return n, nil
	}
	return b.rdb, nil
}

// globEscape quotes the characters SCAN MATCH treats as a pattern.
func globEscape(s string) string {
	var sb strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			sb.WriteByte('\\')
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// stuck reads, in one transaction, a blocked job, the jobs it depends on
// and the queue's cascade: a job that waits although none of its
// dependencies is still open, and no cascade is left to settle it, would
// wait forever. It answers why, or "" for a job that is fine.
func (b *Broker) stuck(ctx context.Context, node redis.Cmdable, k *queueKeys, id string) (string, error) {
	f, err := node.HMGet(ctx, k.job+id, "state", "depends_on").Result()
	if err != nil {
		return "", err
	}
	var deps []string
	if s, _ := f[1].(string); f[0] != string(StateBlocked) || json.Unmarshal([]byte(s), &deps) != nil {
		return "", nil // moved on since the scan, or a job of an older version
	}
	var self *redis.StringCmd
	var states []*redis.StringCmd
	var cascading *redis.IntCmd
	_, err = node.TxPipelined(ctx, func(p redis.Pipeliner) error {
		self = p.HGet(ctx, k.job+id, "state")
		for _, d := range deps {
			states = append(states, p.HGet(ctx, k.job+d, "state"))
		}
		cascading = p.LLen(ctx, k.key("cascade"))
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", err
	}
	if self.Val() != string(StateBlocked) || cascading.Val() > 0 {
		return "", nil
	}
	for _, s := range states {
		if st := State(s.Val()); st.valid() && !st.Final() {
			return "", nil // waits for a job that is still open
		}
	}
	return fmt.Sprintf("job is blocked, but none of the jobs it depends on (%v) is still open, and no dependents are left to settle", deps), nil
}
