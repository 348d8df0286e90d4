// Package fence carries a job's fencing token beyond the queue. fenceq's
// own state never takes a stale worker's result; a handler's writes to
// other systems need the same guard, or a worker that lost its lease (a long
// pause, a partition) can overwrite what its successor wrote.
//
// A handler takes its Token from its job and passes it with each write:
//
//	f, err := fence.NewRedis(rdb) // once, at startup
//
//	// in the handler:
//	ok, err := f.HSet(ctx, "account:7", fence.TokenOf(job), "balance", "120")
//	if err == nil && !ok {
//		return nil // a later claim of this job wrote first: this lease is gone, stop
//	}
//
// A Token is a job's id and the generation of the claim a handler runs
// under. Every later claim of the job has a larger generation, also when
// the job was trimmed and its id enqueued again (generations come from a
// counter per queue: broker's invariants 3 and 10). A fenced write
// records, per job, the highest generation applied, and refuses a lower
// one. Redis writes go through one Lua script (Redis.HSet). For SQL, keep
// a fence column beside the data and make the write conditional:
//
//	UPDATE accounts SET balance = $1, fence = $2
//	 WHERE id = $3 AND fence <= $2
//
// where $2 is the generation: an update that touches no row is the stale
// write, and the handler should stop. The fence is per job: use a column
// (or a hash field) per job id when several jobs write one row.
package fence

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/scripts/lua"
)

// Token identifies the claim a handler runs under.
type Token struct {
	JobID      string // the job's id
	Generation int64  // the claim's generation: larger for every later claim
}

// TokenOf is the fencing token of the job a handler is running.
func TokenOf(j *handlers.Job) Token { return Token{JobID: j.ID, Generation: j.Generation} }

// Redis makes fenced writes to Redis hashes.
type Redis struct {
	rdb    redis.UniversalClient
	script *redis.Script
}

// NewRedis returns a Redis that writes through rdb.
func NewRedis(rdb redis.UniversalClient) (*Redis, error) {
	src, err := lua.FS.ReadFile("fence_hset.lua")
	if err != nil {
		return nil, fmt.Errorf("fenceq: read embedded fence_hset.lua: %w", err)
	}
	return &Redis{rdb: rdb, script: redis.NewScript(string(src))}, nil
}

// HSet writes the field/value pairs into the hash at key, unless a later
// claim of the same job has written to it already; it reports whether it
// wrote. The hash also keeps a field "fence:<job id>" with the highest
// generation applied. A false answer means the handler's lease is gone: it
// should stop.
func (r *Redis) HSet(ctx context.Context, key string, t Token, fieldValues ...string) (bool, error) {
	if len(fieldValues) == 0 || len(fieldValues)%2 != 0 {
		return false, fmt.Errorf("fenceq: fenced HSet of %q: want field/value pairs, got %d strings", key, len(fieldValues))
	}
	if t.JobID == "" {
		return false, fmt.Errorf("fenceq: fenced HSet of %q: the token has no job id", key)
	}
	args := make([]any, 0, 2+len(fieldValues))
	args = append(args, "fence:"+t.JobID, strconv.FormatInt(t.Generation, 10))
	for _, v := range fieldValues {
		args = append(args, v)
	}
	n, err := r.script.Run(ctx, r.rdb, []string{key}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("fenceq: fenced HSet of %q: %w", key, err)
	}
	return n == 1, nil
}
