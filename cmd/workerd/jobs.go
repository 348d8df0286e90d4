package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"text/tabwriter"
	"unicode/utf8"

	"github.com/fenceq/fenceq/broker"
)

const jobsSynopsis = "QUEUE --state STATE [--group G] [--limit N] [--json]"

// lastErrorWidth is how much of a job's last error a line of `workerd jobs`
// shows; `workerd inspect job QUEUE ID` shows all of it.
const lastErrorWidth = 60

// runJobs lists one state's jobs: --state is required, because a queue's
// done jobs are usually many and would bury the few a user came for.
func runJobs(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "jobs", jobsSynopsis)
	var rf redisFlags
	rf.register(fs)
	state := fs.String("state", "", "the state to list, one of "+stateList()+" (required)")
	limit := fs.Int("limit", 100, "most jobs to list, from the head of the state's index")
	asJSON := fs.Bool("json", false, "print one JSON object per line, with the fields of 'workerd inspect job --json'")
	group := fs.String("group", "", "only the jobs of this group (for pending jobs, the group's own index, in the order its turns take them)")
	pos, err := parse(fs, jobsSynopsis, args, 1, 1)
	if err != nil {
		return err
	}
	switch {
	case *state == "":
		return usagef("missing --state: give one of %s (e.g. --state dead)", stateList())
	case !slices.Contains(broker.States, broker.State(*state)):
		return usagef("--state %s: want one of %s", *state, stateList())
	case *limit < 1:
		return usagef("--limit %d: must be at least 1", *limit)
	}
	if err := broker.ValidateGroup(*group); err != nil {
		return usagef("--group: %v", err)
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	q := pos[0]
	if err := requireQueue(ctx, b.Inspector(), q, ""); err != nil {
		return err
	}
	var js []broker.JobInfo
	switch {
	case *asJSON && *group == "":
		js, err = b.Inspector().Jobs(ctx, q, broker.State(*state), *limit) // whole jobs, payloads too
	case *asJSON:
		js, err = wholeJobs(ctx, b.Inspector(), q, broker.State(*state), *group, *limit)
	default:
		js, err = listed(ctx, b.Inspector(), q, broker.State(*state), *group, *limit)
	}
	if err != nil {
		return err
	}
	// Only jobs go to standard output, so that a script can read the ids
	// off the first column; the rest is for whoever watches.
	switch {
	case len(js) == 0:
		fmt.Fprintf(e.stderr, "no %s jobs in queue %s%s\n", *state, q, ofGroup(*group))
	case len(js) == *limit:
		total, known, err := stateTotal(ctx, b.Inspector(), q, broker.State(*state), *group)
		if err != nil {
			return err
		}
		if known {
			if total > int64(*limit) {
				defer fmt.Fprintf(e.stderr, "%d of %d %s jobs of %s%s; --limit N for more\n", *limit, total, *state, q, ofGroup(*group))
			}
		} else {
			defer fmt.Fprintf(e.stderr, "the first %d %s jobs of %s%s; --limit N for more\n", *limit, *state, q, ofGroup(*group))
		}
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		for _, j := range js {
			if err := enc.Encode(jobToJSON(j)); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	for _, j := range js {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\n", j.ID, j.State, j.Kind, j.Attempt, j.MaxAttempts, shorten(j.LastError, lastErrorWidth))
	}
	return tw.Flush()
}

// stateTotal answers how many jobs the listing could show: the queue's
// count of the state, or, with a group, the group's pending count; known
// is false where no count is kept (a group's jobs in other states).
func stateTotal(ctx context.Context, in *broker.Inspector, q string, st broker.State, group string) (total int64, known bool, err error) {
	if group != "" {
		if st != broker.StatePending {
			return 0, false, nil
		}
		p, err := in.Groups(ctx, q, broker.GroupsQuery{Name: group})
		if err != nil || len(p.Groups) == 0 {
			return 0, false, err
		}
		return p.Groups[0].Ready, true, nil
	}
	n, err := in.Counts(ctx, q)
	if err != nil {
		return 0, false, err
	}
	return map[broker.State]int64{broker.StateBlocked: n.Blocked, broker.StateScheduled: n.Scheduled, broker.StatePending: n.Pending,
		broker.StateRunning: n.Running, broker.StateDone: n.Done, broker.StateDead: n.Dead, broker.StateCancelled: n.Cancelled}[st], true, nil
}

func ofGroup(g string) string {
	if g == "" {
		return ""
	}
	return fmt.Sprintf(" in group %q", g)
}

// wholeJobs reads up to limit jobs of a state and group whole (payloads
// too): the listing's ids, then each job.
func wholeJobs(ctx context.Context, in *broker.Inspector, q string, st broker.State, group string, limit int) ([]broker.JobInfo, error) {
	ls, err := listed(ctx, in, q, st, group, limit)
	if err != nil {
		return nil, err
	}
	out := make([]broker.JobInfo, 0, len(ls))
	for _, l := range ls {
		j, err := in.Job(ctx, q, l.ID)
		if errors.Is(err, broker.ErrJobNotFound) {
			continue // gone since the listing
		}
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

// listed reads up to limit jobs of a state (and group) as the table shows
// them, page by page (Inspector.JobPage): no payloads, and the start of
// each error.
func listed(ctx context.Context, in *broker.Inspector, q string, st broker.State, group string, limit int) ([]broker.JobInfo, error) {
	var out []broker.JobInfo
	after := ""
	for len(out) < limit {
		p, err := in.JobPage(ctx, q, broker.JobQuery{State: st, Group: group, After: after, Limit: min(limit-len(out), broker.PageLimitMax)})
		if err != nil {
			return nil, err
		}
		out = append(out, p.Jobs...)
		if p.Next == "" {
			return out, nil
		}
		after = p.Next
	}
	return out, nil
}

func stateList() string {
	names := make([]string, len(broker.States))
	for i, s := range broker.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// shorten is s on one line, cut to at most width characters with an
// ellipsis when longer.
func shorten(s string, width int) string {
	s = strings.Join(strings.Fields(s), " ")
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}
