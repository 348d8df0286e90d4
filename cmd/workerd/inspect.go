package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/fenceq/fenceq/broker"
)

const inspectSynopsis = "[QUEUE | job QUEUE ID] [--json]"

// The --json shapes below are a stable interface: the README lists their
// fields. Add fields; never rename or remove one.

type queueJSON struct {
	Queue                string  `json:"queue"`
	Blocked              int64   `json:"blocked"`
	Scheduled            int64   `json:"scheduled"`
	Pending              int64   `json:"pending"`
	Running              int64   `json:"running"`
	Done                 int64   `json:"done"`
	Dead                 int64   `json:"dead"`
	Cancelled            int64   `json:"cancelled"`
	OldestPendingSeconds float64 `json:"oldest_pending_seconds"`
	DoneLastMinute       int64   `json:"done_last_minute"`
	Paused               bool    `json:"paused"`
	// The queue's limits and what holds its pending jobs back now:
	// Throttled is "" when nothing does (else, e.g., "at most 50 starts
	// per 10s; next start in 4s"); RateStarted counts the starts within
	// the rate's window; NextStartSeconds is 0 unless the rate holds
	// starts back.
	Limits           limitsJSON `json:"limits"`
	RateStarted      int64      `json:"rate_started"`
	NextStartSeconds float64    `json:"next_start_seconds"`
	Throttled        string     `json:"throttled"`
	// The queue's memory, sampled with MEMORY USAGE (broker.Footprint):
	// Memory is "measured", or "unknown" when the server cannot say
	// (miniredis), and then the byte fields are null, as bytes_per_job is
	// for a queue without a job to sample.
	Memory             string           `json:"memory"`
	BytesPerJob        *int64           `json:"bytes_per_job"`
	BytesPerJobByState map[string]int64 `json:"bytes_per_job_by_state,omitempty"`
	IndexEntryBytes    *int64           `json:"index_entry_bytes"`
	FootprintBytes     *int64           `json:"footprint_bytes"`
}

// limitsJSON are a queue's limits; 0 where a limit is not set.
type limitsJSON struct {
	MaxRunning int     `json:"max_running"`
	Rate       int     `json:"rate"`
	PerSeconds float64 `json:"per_seconds"`
}

type leaseJSON struct {
	ID          string    `json:"id"`
	Kind        string    `json:"kind"`
	Attempt     int       `json:"attempt"`
	Generation  int64     `json:"generation"`
	Deadline    time.Time `json:"deadline"`
	LeftSeconds float64   `json:"left_seconds"`
	Expired     bool      `json:"expired"`
	// Holder is the live pool whose registry entry lists this lease;
	// absent when none does.
	Holder *holderJSON `json:"holder,omitempty"`
}

// holderJSON is the pool holding a lease, in `workerd inspect QUEUE --json`.
type holderJSON struct {
	Pool           string  `json:"pool"` // the pool's registry id (workerd workers)
	Name           string  `json:"name,omitempty"`
	Host           string  `json:"host"`
	PID            int     `json:"pid"`
	RunningSeconds float64 `json:"running_seconds"` // since the claim, Redis clock
}

type queueDetailJSON struct {
	queueJSON
	Leases []leaseJSON `json:"leases"`
}

type jobJSON struct {
	Queue           string            `json:"queue"`
	ID              string            `json:"id"`
	Kind            string            `json:"kind"`
	Group           string            `json:"group,omitempty"`
	State           string            `json:"state"`
	Attempt         int               `json:"attempt"`
	MaxAttempts     int               `json:"max_attempts"`
	Priority        int               `json:"priority"`
	Generation      int64             `json:"generation"`
	Payload         json.RawMessage   `json:"payload"`
	Result          json.RawMessage   `json:"result,omitempty"`
	Progress        json.RawMessage   `json:"progress,omitempty"`
	LastError       string            `json:"last_error,omitempty"`
	Errors          []attemptJSON     `json:"errors,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	Renewals        int               `json:"renewals"`
	CancelRequested bool              `json:"cancel_requested"`
	CreatedAt       *time.Time        `json:"created_at,omitempty"`
	RunAt           *time.Time        `json:"run_at,omitempty"`
	ClaimedAt       *time.Time        `json:"claimed_at,omitempty"`
	FinishedAt      *time.Time        `json:"finished_at,omitempty"`
	LeaseUntil      *time.Time        `json:"lease_until,omitempty"`
}

// attemptJSON is one failed attempt of a job's error history.
type attemptJSON struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

func runInspect(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "inspect", inspectSynopsis)
	var rf redisFlags
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print JSON (stable field names, listed in the README)")
	limit := fs.Int("limit", 100, "most leases to list for a queue")
	follow := fs.Bool("follow", false, "with QUEUE: print the queue's events as they happen, until interrupted (needs 'workerd events QUEUE --keep N')")
	pos, err := parse(fs, inspectSynopsis, args, 0, 3)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 2 && pos[0] == "job":
		return usagef("missing ID; usage: workerd inspect job QUEUE ID")
	case len(pos) > 1 && pos[0] != "job":
		return usagef("unexpected arguments: %s; usage: workerd inspect %s", strings.Join(pos[1:], " "), inspectSynopsis)
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	switch len(pos) {
	case 0:
		return inspectAll(ctx, e, b.Inspector(), *asJSON)
	case 1:
		if err := requireQueue(ctx, b.Inspector(), pos[0], ""); err != nil {
			// "workerd inspect job" is a queue's name only when there is
			// such a queue; otherwise the job's queue and id are missing.
			if pos[0] == "job" && errors.As(err, new(*noQueueError)) {
				return usagef("missing QUEUE and ID; usage: workerd inspect job QUEUE ID")
			}
			return err
		}
		if *follow {
			return followEvents(ctx, e, b.Inspector(), pos[0], *asJSON)
		}
		return inspectQueue(ctx, e, b.Inspector(), pos[0], *limit, *asJSON)
	}
	return inspectJob(ctx, e, b.Inspector(), pos[1], pos[2], *asJSON)
}

func overviewJSON(ctx context.Context, in *broker.Inspector, q string) (queueJSON, error) {
	o, err := in.Overview(ctx, q)
	if err != nil {
		return queueJSON{}, err
	}
	f, err := in.Footprint(ctx, q)
	if err != nil {
		return queueJSON{}, err
	}
	out := queueJSON{Queue: q, Blocked: o.Blocked, Scheduled: o.Scheduled, Pending: o.Pending, Running: o.Running, Done: o.Done,
		Dead: o.Dead, Cancelled: o.Cancelled, OldestPendingSeconds: o.HeadAge.Seconds(), DoneLastMinute: o.DoneLastMinute,
		Paused: o.Paused, Memory: "unknown",
		Limits:      limitsJSON{MaxRunning: o.Limits.MaxRunning, Rate: o.Limits.Rate, PerSeconds: o.Limits.Per.Seconds()},
		RateStarted: o.Started, NextStartSeconds: o.NextStart.Seconds(), Throttled: o.Throttled()}
	if f.Measured {
		out.Memory = "measured"
		out.FootprintBytes = &f.Estimate
		if f.Sampled > 0 {
			out.BytesPerJob, out.IndexEntryBytes = &f.PerJob, &f.PerIndexEntry
			out.BytesPerJobByState = map[string]int64{}
			for s, n := range f.PerState {
				out.BytesPerJobByState[string(s)] = n
			}
		}
	}
	return out, nil
}

// byteSize prints a byte count for a person: "612 B", "8.1 MiB", or "unknown".
func byteSize(n *int64) string {
	if n == nil {
		return "unknown"
	}
	v := float64(*n)
	for _, unit := range []string{"B", "KiB", "MiB", "GiB"} {
		if v < 1024 || unit == "GiB" {
			if unit == "B" {
				return fmt.Sprintf("%d B", *n)
			}
			return fmt.Sprintf("%.1f %s", v, unit)
		}
		v /= 1024
	}
	return ""
}

// perJob prints bytes per job: "-" for a queue with nothing to sample.
func perJob(o queueJSON) string {
	if o.Memory == "measured" && o.BytesPerJob == nil {
		return "-"
	}
	return byteSize(o.BytesPerJob)
}

func inspectAll(ctx context.Context, e *env, in *broker.Inspector, asJSON bool) error {
	qs, err := in.Queues(ctx)
	if err != nil {
		return err
	}
	out := struct {
		Queues []queueJSON `json:"queues"`
	}{Queues: []queueJSON{}}
	for _, q := range qs {
		o, err := overviewJSON(ctx, in, q)
		if err != nil {
			return err
		}
		out.Queues = append(out.Queues, o)
	}
	if asJSON {
		return printJSON(e.stdout, out)
	}
	if len(qs) == 0 {
		fmt.Fprintln(e.stdout, "no queues yet (a queue appears with its first enqueue)")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tSCHEDULED\tBLOCKED\tRUNNING\tDONE\tDEAD\tCANCELLED\tOLDEST PENDING\tDONE/MIN\tBYTES/JOB\tMEMORY\t")
	var held []string
	for _, o := range out.Queues {
		name := o.Queue
		switch {
		case o.Paused:
			name += " (paused)"
		case o.Throttled != "":
			name += " (throttled)"
		}
		if o.Throttled != "" && !(o.Paused && o.Throttled == "paused") {
			held = append(held, fmt.Sprintf("%s: %s", o.Queue, o.Throttled))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%s\t%s\t\n", name, o.Pending, o.Scheduled, o.Blocked, o.Running, o.Done,
			o.Dead, o.Cancelled, age(o.OldestPendingSeconds), o.DoneLastMinute, perJob(o), byteSize(o.FootprintBytes))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(held) > 0 {
		fmt.Fprintf(e.stdout, "\nheld back by their limits:\n  %s\n", strings.Join(held, "\n  "))
	}
	if len(out.Queues) > 0 && out.Queues[0].Memory == "unknown" {
		fmt.Fprintln(e.stdout, "\nmemory unknown: this Redis does not answer MEMORY USAGE ... SAMPLES (miniredis does not)")
	}
	return nil
}

func inspectQueue(ctx context.Context, e *env, in *broker.Inspector, q string, limit int, asJSON bool) error {
	o, err := overviewJSON(ctx, in, q)
	if err != nil {
		return err
	}
	ls, err := in.Leases(ctx, q, limit)
	if err != nil {
		return err
	}
	// The holders come from the worker registry: without it the leases
	// are still listed.
	ws, werr := in.Workers(ctx)
	out := queueDetailJSON{queueJSON: o, Leases: []leaseJSON{}}
	expired := 0
	for _, l := range ls {
		lj := leaseJSON{ID: l.ID, Kind: l.Kind, Attempt: l.Attempt, Generation: l.Generation,
			Deadline: l.Deadline.UTC(), LeftSeconds: l.Left.Seconds(), Expired: l.Expired()}
		if w, j, ok := ws.Holder(q, l.ID, l.Generation); ok {
			now := l.Deadline.Add(-l.Left) // the Redis clock when the lease was read
			lj.Holder = &holderJSON{Pool: w.ID, Name: w.Name, Host: w.Host, PID: w.PID, RunningSeconds: now.Sub(j.Since).Seconds()}
		}
		out.Leases = append(out.Leases, lj)
		if l.Expired() {
			expired++
		}
	}
	if asJSON {
		return printJSON(e.stdout, out)
	}
	if o.Paused {
		fmt.Fprintf(e.stdout, "queue %s is PAUSED: nothing is claimed until 'workerd resume %s'\n", q, q)
	}
	fmt.Fprintf(e.stdout, "queue %s: %d pending, %d scheduled, %d running, %d done, %d dead, %d cancelled; oldest pending %s; %d done in the last minute\n",
		q, o.Pending, o.Scheduled, o.Running, o.Done, o.Dead, o.Cancelled, age(o.OldestPendingSeconds), o.DoneLastMinute)
	fmt.Fprintln(e.stdout, limitsLine(o))
	if o.Throttled != "" && o.Throttled != "paused" {
		fmt.Fprintf(e.stdout, "throttled: %s\n", o.Throttled)
	} else if !o.Paused && o.Pending > 0 && o.Running == 0 {
		fmt.Fprintf(e.stdout, "nothing holds the %d pending job(s) back, and none runs: check that a pool serves queue %s\n", o.Pending, q)
	}
	fmt.Fprintln(e.stdout, memoryLine(o))
	fmt.Fprintln(e.stdout)
	if len(ls) == 0 {
		fmt.Fprintln(e.stdout, "no running jobs")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tKIND\tATTEMPT\tGENERATION\tLEASE\tHELD BY\tRUNNING FOR")
	for i, l := range ls {
		left := "expires in " + l.Left.Round(time.Millisecond).String()
		if l.Expired() {
			left = fmt.Sprintf("EXPIRED %s ago, not yet reaped", (-l.Left).Round(time.Millisecond))
		}
		held, running := "-", "-"
		if h := out.Leases[i].Holder; h != nil {
			held = fmt.Sprintf("%s pid %d (%s)", h.Host, h.PID, cmp.Or(h.Name, "pool "+h.Pool))
			running = (time.Duration(h.RunningSeconds * float64(time.Second))).Round(time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s\n", l.ID, l.Kind, l.Attempt, l.Generation, left, held, running)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if werr != nil {
		fmt.Fprintf(e.stderr, "the holders are not shown: %v\n", werr)
	} else if slices.ContainsFunc(out.Leases, func(l leaseJSON) bool { return l.Holder == nil }) {
		fmt.Fprintln(e.stderr, "HELD BY -: no live pool lists the lease yet (a pool lists its jobs at each refresh of its registry entry, every 10s by default), or its pool is gone (workerd workers lists the live ones)")
	}
	if expired > 0 {
		fmt.Fprintf(e.stdout, "\n%d lease(s) expired and not yet reaped: their workers are gone or stalled. A running pool of this queue\nreaps them within a third of the lease; if the list does not shrink, no pool serves this queue.\n", expired)
	}
	return nil
}

// limitsLine shows the queue's limits and how much of each is in use.
func limitsLine(o queueJSON) string {
	var parts []string
	if l := o.Limits; l.MaxRunning > 0 {
		parts = append(parts, fmt.Sprintf("at most %d running (%d running)", l.MaxRunning, o.Running))
	}
	if l := o.Limits; l.Rate > 0 {
		per := time.Duration(l.PerSeconds * float64(time.Second))
		parts = append(parts, fmt.Sprintf("at most %d starts per %v (%d started in the last %v)", l.Rate, per, o.RateStarted, per))
	}
	if len(parts) == 0 {
		return "limits: none (set them with 'workerd limit " + o.Queue + "')"
	}
	return "limits: " + strings.Join(parts, ", ")
}

// memoryLine says what the queue holds in Redis, and how that was found.
func memoryLine(o queueJSON) string {
	switch {
	case o.Memory != "measured":
		return "memory: unknown (this Redis does not answer MEMORY USAGE ... SAMPLES)"
	case o.BytesPerJob == nil:
		return fmt.Sprintf("memory: about %s (no job to sample)", byteSize(o.FootprintBytes))
	}
	var states []string
	for _, s := range broker.States {
		if n, ok := o.BytesPerJobByState[string(s)]; ok {
			states = append(states, fmt.Sprintf("%s %d", s, n))
		}
	}
	return fmt.Sprintf("memory: about %s; %s per job (%s), %s per index entry (MEMORY USAGE of the newest %d jobs of each state)",
		byteSize(o.FootprintBytes), byteSize(o.BytesPerJob), strings.Join(states, ", "), byteSize(o.IndexEntryBytes), broker.FootprintSamples)
}

func inspectJob(ctx context.Context, e *env, in *broker.Inspector, q, id string, asJSON bool) error {
	j, err := in.Job(ctx, q, id)
	if err != nil {
		if errors.Is(err, broker.ErrJobNotFound) {
			if err := requireQueue(ctx, in, q, ""); err != nil {
				return err
			}
			fmt.Fprintf(e.stderr, "no job %q in queue %q\n", id, q)
			return errFailed
		}
		return err
	}
	if asJSON {
		return printJSON(e.stdout, jobToJSON(j))
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	row := func(k string, v any) { fmt.Fprintf(tw, "%s\t%v\n", k, v) }
	row("queue", j.Queue)
	row("id", j.ID)
	row("kind", j.Kind)
	if j.Group != "" {
		row("group", quoteUnprintable(j.Group))
	}
	row("state", j.State)
	row("attempt", fmt.Sprintf("%d of %d", j.Attempt, j.MaxAttempts))
	row("generation", j.Generation)
	row("priority", j.Priority)
	row("payload", string(j.Payload))
	// One row per entry, key=value, in key order; text that would break
	// the table (a tab, a newline) is quoted.
	for i, k := range slices.Sorted(maps.Keys(j.Metadata)) {
		label := ""
		if i == 0 {
			label = "metadata"
		}
		row(label, quoteUnprintable(k)+"="+quoteUnprintable(j.Metadata[k]))
	}
	for _, kv := range []struct {
		k string
		v []byte
	}{{"result", j.Result}, {"progress", j.Progress}} {
		if len(kv.v) > 0 {
			row(kv.k, string(kv.v))
		}
	}
	for _, kv := range []struct {
		k string
		t time.Time
	}{{"created", j.CreatedAt}, {"run at", j.RunAt}, {"claimed", j.ClaimedAt}, {"finished", j.FinishedAt}, {"lease until", j.LeaseUntil}} {
		if !kv.t.IsZero() {
			row(kv.k, kv.t.UTC().Format(time.RFC3339Nano))
		}
	}
	if j.CancelRequested {
		row("cancel", "requested")
	}
	if j.State == broker.StateRunning {
		row("renewals", j.Renewals)
	}
	if j.LastError != "" {
		row("last error", j.LastError)
	}
	for _, a := range j.Errors {
		row(fmt.Sprintf("error, attempt %d", a.Attempt), a.At.UTC().Format(time.RFC3339)+" "+shorten(a.Error, 120))
	}
	return tw.Flush()
}

func jobToJSON(j broker.JobInfo) jobJSON {
	out := jobJSON{Queue: j.Queue, ID: j.ID, Kind: j.Kind, Group: j.Group, State: string(j.State), Attempt: j.Attempt, MaxAttempts: j.MaxAttempts,
		Priority: j.Priority, Generation: j.Generation, Payload: rawOrString(j.Payload), Result: rawOrString(j.Result),
		Progress: rawOrString(j.Progress), LastError: j.LastError, CancelRequested: j.CancelRequested,
		CreatedAt: timePtr(j.CreatedAt), RunAt: timePtr(j.RunAt), ClaimedAt: timePtr(j.ClaimedAt),
		FinishedAt: timePtr(j.FinishedAt), LeaseUntil: timePtr(j.LeaseUntil), Renewals: j.Renewals, Metadata: j.Metadata}
	for _, a := range j.Errors {
		out.Errors = append(out.Errors, attemptJSON{Attempt: a.Attempt, At: a.At.UTC(), Error: a.Error})
	}
	return out
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// rawOrString keeps JSON as JSON and quotes anything else.
func rawOrString(b []byte) json.RawMessage {
	if len(b) == 0 {
		return nil
	}
	if json.Valid(b) {
		return b
	}
	q, _ := json.Marshal(string(b))
	return q
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}

func age(seconds float64) string {
	if seconds <= 0 {
		return "-"
	}
	return (time.Duration(seconds * float64(time.Second))).Round(time.Millisecond).String()
}

// followEvents tails the queue's event stream: the last twenty events,
// then every later one, in order, as it happens, until interrupted.
func followEvents(ctx context.Context, e *env, in *broker.Inspector, q string, asJSON bool) error {
	kept, err := in.EventsKept(ctx, q)
	if err != nil {
		return err
	}
	if kept == 0 {
		fmt.Fprintf(e.stderr, "queue %s records no events; turn them on with 'workerd events %s --keep 10000'\n", q, q)
		return errFailed
	}
	evs, err := in.RecentEvents(ctx, q, 20)
	if err != nil {
		return err
	}
	// Each read goes on from the last event seen. With none seen, the
	// stream held nothing when RecentEvents read it, so everything in it
	// from "0" on came since; "$" would mean "after whatever is last when
	// this read starts", and lose each event that came between two reads.
	after := "0"
	for ctx.Err() == nil {
		for _, ev := range evs {
			after = ev.StreamID
			if asJSON {
				_ = json.NewEncoder(e.stdout).Encode(map[string]any{"time": ev.Time.UTC(), "event": ev.Event,
					"id": ev.JobID, "generation": ev.Generation, "detail": ev.Detail})
				continue
			}
			fmt.Fprintf(e.stdout, "%s  %-16s %s  gen %d  %s\n", ev.Time.UTC().Format("15:04:05.000"), ev.Event, ev.JobID, ev.Generation, ev.Detail)
		}
		if evs, err = in.Events(ctx, q, after, 1000, time.Second); err != nil && ctx.Err() == nil {
			return err
		}
	}
	return nil
}

// quoteUnprintable answers s as it is, or Go-quoted when it holds a control
// character (a tab or a newline would break the text table) or is empty.
func quoteUnprintable(s string) string {
	if s == "" || strings.ContainsFunc(s, unicode.IsControl) {
		return strconv.Quote(s)
	}
	return s
}
