package broker

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// JobInfo is a job as stored, for inspection.
type JobInfo struct {
	Queue, ID, Kind  string
	Payload          []byte
	State            State
	Attempt          int
	MaxAttempts      int
	Priority         int
	Generation       int64
	Token            string    // the valid claim's token while running, else empty
	LeaseUntil       time.Time // Redis clock; zero unless running
	RunAt            time.Time
	CreatedAt        time.Time
	ClaimedAt        time.Time // last claim; zero if never claimed
	FinishedAt       time.Time // zero until done, dead or cancelled
	LastError        string
	Result, Progress []byte
	CancelRequested  bool
}

// Job reads one job. It answers an error wrapping ErrJobNotFound when there
// is none, and a *CorruptJobError when its hash cannot be read as a job.
func (b *Broker) Job(ctx context.Context, queue, id string) (JobInfo, error) {
	if err := validID(queue, id); err != nil {
		return JobInfo{}, err
	}
	h, err := b.rdb.HGetAll(ctx, b.queueKeys(queue).job+id).Result()
	if err != nil {
		if redis.HasErrorPrefix(err, "WRONGTYPE") {
			return JobInfo{}, &CorruptJobError{Queue: queue, ID: id, Reason: "job key is not a hash"}
		}
		return JobInfo{}, fmt.Errorf("fenceq: read job %q in queue %q: %w", id, queue, err)
	}
	if len(h) == 0 {
		return JobInfo{}, notFound(queue, id)
	}
	return parseJob(queue, id, h)
}

func parseJob(queue, id string, h map[string]string) (JobInfo, error) {
	j := JobInfo{
		Queue: queue, ID: id, Kind: h["kind"], Payload: []byte(h["payload"]),
		State: State(h["state"]), Token: h["token"], LastError: h["last_error"],
		Result: []byte(h["result"]), Progress: []byte(h["progress"]),
		CancelRequested: h["cancel"] == "1",
	}
	bad := func(reason string) (JobInfo, error) {
		return j, &CorruptJobError{Queue: queue, ID: id, Reason: reason}
	}
	if !j.State.valid() {
		return bad(fmt.Sprintf("field state is %q, not one of %v", h["state"], States))
	}
	if j.Kind == "" {
		return bad("field kind is missing")
	}
	ints := []struct {
		name     string
		required bool
	}{
		{"attempt", true}, {"max_attempts", true}, {"gen", true}, {"priority", false},
		{"lease_until", false}, {"run_at", false}, {"created_at", false},
		{"claimed_at", false}, {"finished_at", false},
	}
	vals := make(map[string]int64, len(ints))
	for _, f := range ints {
		s, ok := h[f.name]
		if !ok {
			if f.required {
				return bad("field " + f.name + " is missing")
			}
			continue
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return bad(fmt.Sprintf("field %s is %q, not an integer", f.name, short(s)))
		}
		vals[f.name] = n
	}
	j.Attempt, j.MaxAttempts, j.Priority = int(vals["attempt"]), int(vals["max_attempts"]), int(vals["priority"])
	j.Generation = vals["gen"]
	j.LeaseUntil, j.RunAt, j.CreatedAt = msTime(vals["lease_until"]), msTime(vals["run_at"]), msTime(vals["created_at"])
	j.ClaimedAt, j.FinishedAt = msTime(vals["claimed_at"]), msTime(vals["finished_at"])
	return j, nil
}

// Counts is how many jobs a queue holds in each state, read from the indexes.
type Counts struct {
	Scheduled, Pending, Running, Done, Dead, Cancelled int64
}

// Counts reads the size of each index of queue in one round trip.
func (b *Broker) Counts(ctx context.Context, queue string) (Counts, error) {
	if err := validName("queue", queue); err != nil {
		return Counts{}, err
	}
	k := b.queueKeys(queue)
	cmds := make([]*redis.IntCmd, len(States))
	_, err := b.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range States {
			cmds[i] = p.ZCard(ctx, k.index(s))
		}
		return nil
	})
	if err != nil {
		return Counts{}, fmt.Errorf("fenceq: count jobs in queue %q: %w", queue, err)
	}
	return Counts{
		Scheduled: cmds[0].Val(), Pending: cmds[1].Val(), Running: cmds[2].Val(),
		Done: cmds[3].Val(), Dead: cmds[4].Val(), Cancelled: cmds[5].Val(),
	}, nil
}

// Queues lists, sorted, every queue that a broker with this prefix has
// enqueued to.
func (b *Broker) Queues(ctx context.Context) ([]string, error) {
	qs, err := b.rdb.SMembers(ctx, b.queuesKey()).Result()
	if err != nil {
		return nil, fmt.Errorf("fenceq: list queues: %w", err)
	}
	slices.Sort(qs)
	return qs, nil
}

// ExpiredLease is a lease past its expiry that no reaper has taken yet.
type ExpiredLease struct {
	ID, Kind   string
	Attempt    int
	Generation int64
	Deadline   time.Time     // Redis clock
	Overdue    time.Duration // how long past Deadline, on Redis's clock
}

// ExpiredLeases lists up to limit leases of queue that expired and are not
// yet reaped, oldest first: after a deploy, a long list that does not shrink
// means no live worker is reaping this queue.
func (b *Broker) ExpiredLeases(ctx context.Context, queue string, limit int) ([]ExpiredLease, error) {
	if err := validName("queue", queue); err != nil {
		return nil, err
	}
	if limit < 1 {
		return nil, &ValidationError{Field: "limit", Value: fmt.Sprint(limit), Reason: "must be at least 1"}
	}
	v, err := b.run(ctx, b.scripts.expired, b.queueKeys(queue), limit).Result()
	r := newReply("expired leases "+queue, v, err)
	now := r.int()
	var out []ExpiredLease
	for r.more() {
		e := ExpiredLease{ID: r.str()}
		until := r.int()
		e.Kind, e.Attempt, e.Generation = r.str(), int(r.int()), r.int()
		e.Deadline, e.Overdue = msTime(until), time.Duration(now-until)*time.Millisecond
		out = append(out, e)
	}
	if r.err != nil {
		return nil, r.err
	}
	return out, nil
}
