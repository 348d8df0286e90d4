package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

func runRelease(ctx context.Context, e *env, args []string) error {
	b, pos, err := positional(ctx, e, "release", "QUEUE ID", args)
	if err != nil {
		return err
	}
	r, err := b.Inspector().ReleaseUnowned(ctx, pos[0], pos[1])
	if err != nil {
		return jobError(ctx, e, b.Inspector(), pos[0], err)
	}
	if r.Previous == broker.StateRunning {
		fmt.Fprintf(e.stdout, "released %s: was running, now %s (generation %d); its worker's late results will be rejected\n", pos[1], r.State, r.Generation)
	} else {
		fmt.Fprintf(e.stdout, "%s was not running (%s, not finished); its generation is now %d, so no old claim can settle it\n", pos[1], r.Previous, r.Generation)
	}
	return nil
}

func runRetry(ctx context.Context, e *env, args []string) error {
	const synopsis = "QUEUE ID | QUEUE --dead [--limit N]"
	fs := newFlags(e, "retry", synopsis)
	var rf redisFlags
	rf.register(fs)
	dead := fs.Bool("dead", false, "retry every dead job of the queue")
	limit := fs.Int("limit", 0, "with --dead: at most this many (default: all)")
	pos, err := parse(fs, synopsis, args, 1, 2)
	if err != nil {
		return err
	}
	if *dead == (len(pos) == 2) {
		return usagef("give a job id or --dead; usage: workerd retry %s", synopsis)
	}
	if *limit < 0 {
		return usagef("--limit %d: give 0 (every dead job) or more", *limit)
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	if len(pos) == 2 {
		prev, err := b.Inspector().Retry(ctx, pos[0], pos[1])
		if err != nil {
			return jobError(ctx, e, b.Inspector(), pos[0], err)
		}
		fmt.Fprintf(e.stdout, "retrying %s (was %s)\n", pos[1], prev)
		return nil
	}
	if err := requireQueue(ctx, b.Inspector(), pos[0], ""); err != nil {
		return err
	}
	// One call: it sends each job dead when it began at most once, in
	// bounded steps, so a job that dies again meanwhile is not sent again
	// and a queue whose jobs keep dying does not keep this going.
	n := *limit
	if n == 0 {
		n = math.MaxInt
	}
	total, err := b.Inspector().RetryDead(ctx, pos[0], n)
	if err != nil {
		if total > 0 {
			fmt.Fprintf(e.stdout, "retrying %d dead job(s) of %s\n", total, pos[0])
		}
		return err
	}
	fmt.Fprintf(e.stdout, "retrying %d dead job(s) of %s\n", total, pos[0])
	return nil
}

func runCancel(ctx context.Context, e *env, args []string) error {
	b, pos, err := positional(ctx, e, "cancel", "QUEUE ID", args)
	if err != nil {
		return err
	}
	st, err := b.Inspector().Cancel(ctx, pos[0], pos[1])
	if err != nil {
		return jobError(ctx, e, b.Inspector(), pos[0], err)
	}
	switch st {
	case broker.StateCancelled:
		fmt.Fprintf(e.stdout, "cancelled %s\n", pos[1])
	case broker.StateRunning:
		fmt.Fprintf(e.stdout, "cancel requested for %s: its handler is told at the next heartbeat\n", pos[1])
	default:
		fmt.Fprintf(e.stdout, "%s had already finished (%s); nothing to cancel\n", pos[1], st)
	}
	return nil
}

// runCheck verifies that every job of a queue, or of every queue, is in
// the index of its state (the design's invariant 6), and exits 1 when one
// is not.
func runCheck(ctx context.Context, e *env, args []string) error {
	b, queues, err := checkTargets(ctx, e, args)
	if err != nil {
		return err
	}
	bad, unsure := 0, 0
	for _, q := range queues {
		n, u, err := checkQueue(ctx, e, b.Inspector(), q)
		if err != nil {
			return err
		}
		bad, unsure = bad+n, unsure+u
	}
	if bad > 0 {
		fmt.Fprintf(e.stdout, "%d inconsistenc(ies) in %d queue(s), each still there when read again at one instant\n", bad, len(queues))
	}
	if unsure > 0 {
		fmt.Fprintf(e.stdout, "%d more job(s) looked out of place but were not read again (check reads at most %d again per queue); run check again\n",
			unsure, broker.CheckRecheckMax)
	}
	if bad > 0 || unsure > 0 {
		return errFailed
	}
	fmt.Fprintf(e.stdout, "ok: %d queue(s), every job in the index of its state\n", len(queues))
	return nil
}

// checkTargets parses check's command line, connects, and answers the
// queue it names (which must exist), or else every queue.
func checkTargets(ctx context.Context, e *env, args []string) (*broker.Broker, []string, error) {
	const synopsis = "[QUEUE]"
	fs := newFlags(e, "check", synopsis)
	var rf redisFlags
	rf.register(fs)
	pos, err := parse(fs, synopsis, args, 0, 1)
	if err != nil {
		return nil, nil, err
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return nil, nil, err
	}
	if len(pos) == 1 {
		if err := requireQueue(ctx, b.Inspector(), pos[0], ""); err != nil {
			return nil, nil, err
		}
		return b, pos, nil
	}
	queues, err := b.Inspector().Queues(ctx)
	if err != nil {
		return nil, nil, err
	}
	return b, queues, nil
}

// checkQueue prints each inconsistency confirmed in queue q, one a line,
// and answers how many there were and how many more were not read again.
func checkQueue(ctx context.Context, e *env, in *broker.Inspector, q string) (confirmed, unsure int, err error) {
	found, err := in.Check(ctx, q)
	if err != nil {
		return 0, 0, err
	}
	for _, f := range found {
		if f.Unconfirmed {
			unsure++
			continue
		}
		confirmed++
		fmt.Fprintf(e.stdout, "%s: %s\n", q, f) // "<id>: <problem>", or a group's problem alone
	}
	return confirmed, unsure, nil
}

// positional parses a command that takes exactly the arguments synopsis
// names (and the connection flags), and connects.
func positional(ctx context.Context, e *env, name, synopsis string, args []string) (*broker.Broker, []string, error) {
	fs := newFlags(e, name, synopsis)
	var rf redisFlags
	rf.register(fs)
	n := len(strings.Fields(synopsis))
	pos, err := parse(fs, synopsis, args, n, n)
	if err != nil {
		return nil, nil, err
	}
	_, b, err := rf.connect(ctx, e)
	return b, pos, err
}

// jobError is notFoundIsFailure for a command on one job, which says so
// when it is the queue that does not exist.
func jobError(ctx context.Context, e *env, in *broker.Inspector, queue string, err error) error {
	if errors.Is(err, broker.ErrJobNotFound) {
		if qerr := requireQueue(ctx, in, queue, ""); qerr != nil {
			return qerr
		}
	}
	return notFoundIsFailure(e, err)
}

// notFoundIsFailure passes a missing job on as a failure (exit 1, the
// error after the command's prefix), and an invalid argument as a usage
// error.
func notFoundIsFailure(_ *env, err error) error {
	if errors.Is(err, broker.ErrInvalid) {
		return usagef("%v", err)
	}
	return err
}

func runPause(ctx context.Context, e *env, args []string) error {
	const synopsis = "QUEUE [--create]"
	fs := newFlags(e, "pause", synopsis)
	var rf redisFlags
	rf.register(fs)
	create := fs.Bool("create", false, createHelp)
	pos, err := parse(fs, synopsis, args, 1, 1)
	if err != nil {
		return err
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	q := pos[0]
	if err := requireQueueToSet(ctx, b.Inspector(), q, true, *create); err != nil {
		return err
	}
	if err := b.Inspector().Pause(ctx, q); err != nil {
		return notFoundIsFailure(e, err)
	}
	fmt.Fprintf(e.stdout, "paused %s: enqueues are accepted, nothing is claimed; running jobs finish\n", q)
	return nil
}

func runResume(ctx context.Context, e *env, args []string) error {
	b, pos, err := positional(ctx, e, "resume", "QUEUE", args)
	if err != nil {
		return err
	}
	q := pos[0]
	if err := requireQueue(ctx, b.Inspector(), q, ""); err != nil {
		return err
	}
	if err := b.Inspector().Resume(ctx, q); err != nil {
		return notFoundIsFailure(e, err)
	}
	fmt.Fprintf(e.stdout, "resumed %s\n", q)
	return nil
}

// runLimit sets, changes or clears a queue's limits, shared by every
// worker, then shows them; without a change it only shows them.
func runLimit(ctx context.Context, e *env, args []string) error {
	o, err := parseLimitFlags(e, args)
	if err != nil {
		return err
	}
	_, b, err := o.redis.connect(ctx, e)
	if err != nil {
		return err
	}
	q := o.queue
	sets := o.clear || o.change() || o.groups.changes()
	if err := requireQueueToSet(ctx, b.Inspector(), q, sets, o.create); err != nil {
		return err
	}
	if o.groups.changes() {
		// The queue-wide change could still be refused once the group
		// change went through: refuse it first.
		if err := o.precheck(ctx, b.Inspector()); err != nil {
			return err
		}
		if err := o.groups.apply(ctx, e, b.Inspector(), q); err != nil {
			return err
		}
	}
	if o.clear || o.change() {
		if err := o.apply(ctx, e, b); err != nil {
			return err
		}
	}
	l, err := b.Inspector().Limits(ctx, q)
	if err != nil {
		return notFoundIsFailure(e, err)
	}
	fmt.Fprintf(e.stdout, "%s: %s\n", q, l)
	return o.groups.show(ctx, e.stdout, b.Inspector(), q, o.groups.changes())
}

// limitFlags are limit's command line.
type limitFlags struct {
	redis         redisFlags
	queue         string
	maxRunning    int
	rate          int
	per           time.Duration
	clear, create bool
	given         map[string]bool
	groups        groupLimitFlags // the group limits (grouplimit.go)
}

// parseLimitFlags parses limit's flags and refuses a limit that is not
// positive (--clear removes limits) and --clear with a limit.
func parseLimitFlags(e *env, args []string) (*limitFlags, error) {
	const synopsis = "QUEUE [--max-running N] [--rate N] [--per D] [--create] | QUEUE --clear\n" +
		"       QUEUE [--group G] [--group-max-running N] [--group-rate N/PERIOD] [--group-ordered[=false]] [--reset]"
	fs := newFlags(e, "limit", synopsis)
	o := &limitFlags{given: map[string]bool{}}
	o.groups.given = o.given
	o.redis.register(fs)
	o.groups.register(fs)
	fs.IntVar(&o.maxRunning, "max-running", 0, "at most this many jobs of the queue run at once, across every worker (other limits are kept)")
	fs.IntVar(&o.rate, "rate", 0, "at most this many jobs start per --per, across every worker (other limits are kept)")
	fs.DurationVar(&o.per, "per", 0, "the rate's window, e.g. 1s or 1m")
	fs.BoolVar(&o.clear, "clear", false, "remove all of the queue's limits")
	fs.BoolVar(&o.create, "create", false, createHelp)
	pos, err := parse(fs, synopsis, args, 1, 1)
	if err != nil {
		return nil, err
	}
	o.queue = pos[0]
	fs.Visit(func(f *flag.Flag) { o.given[f.Name] = true })
	for _, f := range []struct {
		name string
		bad  bool
	}{{"max-running", o.maxRunning < 1}, {"rate", o.rate < 1}, {"per", o.per <= 0}} {
		if o.given[f.name] && f.bad {
			return nil, usagef("--%s %s: must be positive; to remove the queue's limits, use --clear", f.name, fs.Lookup(f.name).Value)
		}
	}
	if o.clear && o.change() {
		return nil, usagef("--clear removes every limit: give it without --max-running, --rate or --per")
	}
	if o.clear && (o.groups.changes() || o.given["group"]) {
		return nil, usagef("--clear removes the queue's own limits, not its groups': give it without --group and the --group-* flags")
	}
	if err := o.groups.check(); err != nil {
		return nil, err
	}
	return o, nil
}

// precheck refuses, before anything is written, a rate or period whose
// other half the queue lacks (ChangeLimits would refuse it, and a command
// that changes group limits too would then have changed half).
func (o *limitFlags) precheck(ctx context.Context, in *broker.Inspector) error {
	if o.given["rate"] == o.given["per"] {
		return nil
	}
	l, err := in.Limits(ctx, o.queue)
	if err != nil {
		return err
	}
	if l.Rate == 0 {
		return usagef("--rate and --per go together, and the queue has no rate yet: give both, e.g. --rate 100 --per 1m")
	}
	return nil
}

// change reports whether a limit was given.
func (o *limitFlags) change() bool {
	return o.given["max-running"] || o.given["rate"] || o.given["per"]
}

// apply clears the limits, or changes those given and keeps the others,
// in one step inside Redis (broker.Inspector.ChangeLimits): --rate alone keeps
// --max-running and the period, even ones set at the same time.
func (o *limitFlags) apply(ctx context.Context, e *env, b *broker.Broker) error {
	q := o.queue
	var err error
	if o.clear {
		err = b.Inspector().SetLimits(ctx, q, broker.Limits{})
	} else {
		_, err = b.Inspector().ChangeLimits(ctx, q, broker.LimitsChange{
			To:         broker.Limits{MaxRunning: o.maxRunning, Rate: o.rate, Per: o.per},
			MaxRunning: o.given["max-running"], Rate: o.given["rate"], Per: o.given["per"],
		})
	}
	var ve *broker.ValidationError
	if errors.As(err, &ve) && (ve.Field == "rate" || ve.Field == "period") {
		return usagef("--rate and --per go together, and the queue has no rate yet: give both, e.g. --rate 100 --per 1m")
	}
	if err != nil {
		return notFoundIsFailure(e, err)
	}
	return nil
}

func runEvents(ctx context.Context, e *env, args []string) error {
	const synopsis = "QUEUE [--keep N | --off] [--create]"
	fs := newFlags(e, "events", synopsis)
	var rf redisFlags
	rf.register(fs)
	keep := fs.Int("keep", 0, "record the queue's lifecycle events, keeping about the last N")
	off := fs.Bool("off", false, "stop recording events and delete the stream")
	create := fs.Bool("create", false, createHelp)
	pos, err := parse(fs, synopsis, args, 1, 1)
	if err != nil {
		return err
	}
	if *off && *keep > 0 {
		return usagef("give --keep or --off, not both")
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	q := pos[0]
	if err := requireQueueToSet(ctx, b.Inspector(), q, *off || *keep > 0, *create); err != nil {
		return err
	}
	if *off || *keep > 0 {
		if err := b.Inspector().SetEvents(ctx, q, *keep); err != nil {
			return notFoundIsFailure(e, err)
		}
	}
	n, err := b.Inspector().EventsKept(ctx, q)
	if err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintf(e.stdout, "%s: events off\n", q)
	} else {
		fmt.Fprintf(e.stdout, "%s: recording events, keeping about %d; follow them with 'workerd inspect %s --follow'\n", q, n, q)
	}
	return nil
}

const createHelp = "set up a queue that has no jobs yet (without it, a name that is no queue is refused: it is most likely a typo)"

// requireQueue answers an error (exit 1) naming the known queues when q is
// no queue: a name no job was ever enqueued to, and that nobody set up
// (paused, limited, group limits, recording events), is most likely a typo, and a command
// that went on would show or change nothing the user meant. hint ends the
// message.
func requireQueue(ctx context.Context, in *broker.Inspector, q, hint string) error {
	qs, err := in.Queues(ctx)
	if err != nil {
		return err
	}
	if slices.Contains(qs, q) {
		return nil
	}
	// Set up ahead of its first job (pause --create, limit, events): known
	// too, so that it can be inspected, resumed and changed again.
	paused, err := in.Paused(ctx, q)
	if err != nil {
		if errors.Is(err, broker.ErrInvalid) {
			return usagef("%v", err)
		}
		return err
	}
	limits, err := in.Limits(ctx, q)
	if err != nil {
		return err
	}
	events, err := in.EventsKept(ctx, q)
	if err != nil {
		return err
	}
	if paused || limits != (broker.Limits{}) || events > 0 {
		return nil
	}
	if g, err := in.GroupLimits(ctx, q, ""); err != nil {
		return err
	} else if g.Defaults != (broker.GroupLimits{}) || g.Overrides > 0 {
		return nil
	}
	where := ""
	if in.Prefix() != broker.PrefixDefault {
		where = fmt.Sprintf(" under prefix %q", in.Prefix())
	}
	const shown = 20
	var known string
	switch {
	case len(qs) == 0:
		known = fmt.Sprintf("no queues%s yet: a queue appears with its first enqueue", where)
	case len(qs) > shown:
		known = fmt.Sprintf("known queues%s: %s, and %d more", where, strings.Join(qs[:shown], ", "), len(qs)-shown)
	default:
		known = fmt.Sprintf("known queues%s: %s", where, strings.Join(qs, ", "))
	}
	return &noQueueError{fmt.Sprintf("no queue %q (%s)%s", q, known, hint)}
}

// noQueueError is requireQueue's answer for a name that is no queue: exit 1.
type noQueueError struct{ msg string }

func (e *noQueueError) Error() string { return e.msg }

// requireQueueToSet is requireQueue for a command that, when set is true,
// changes q's settings: with --create (create) it may set up a queue before
// its first job.
func requireQueueToSet(ctx context.Context, in *broker.Inspector, q string, set, create bool) error {
	switch {
	case !set:
		return requireQueue(ctx, in, q, "")
	case create:
		// A new queue's name follows the rule an enqueue applies.
		if err := broker.ValidateQueue(q); err != nil {
			return usagef("%v", err)
		}
		return nil
	}
	return requireQueue(ctx, in, q, "; to set it up before its first job, add --create")
}
