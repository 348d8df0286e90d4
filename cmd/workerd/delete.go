package main

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// runDelete deletes one job that no worker holds.
func runDelete(ctx context.Context, e *env, args []string) error {
	const synopsis = "QUEUE ID [--state STATE]"
	fs := newFlags(e, "delete", synopsis)
	var rf redisFlags
	rf.register(fs)
	seen := fs.String("state", "", "delete only if the job is still in this state (e.g. dead); refused, unchanged, otherwise")
	pos, err := parse(fs, synopsis, args, 2, 2)
	if err != nil {
		return err
	}
	if *seen != "" && !validState(*seen) {
		return usagef("--state %s: want one of %s, or leave it out", *seen, stateList())
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	st, err := b.Inspector().Delete(ctx, pos[0], pos[1], broker.State(*seen))
	if err != nil {
		return jobError(ctx, e, b.Inspector(), pos[0], err)
	}
	switch st {
	case broker.StateBlocked, broker.StateScheduled, broker.StatePending:
		fmt.Fprintf(e.stdout, "deleted %s (was %s); jobs that depended on it are cancelled unless they run anyway\n", pos[1], st)
	default:
		fmt.Fprintf(e.stdout, "deleted %s (was %s)\n", pos[1], st)
	}
	return nil
}

// runPurge deletes every job of a finished state of a queue, in bounded
// steps, printing its progress.
func runPurge(ctx context.Context, e *env, args []string) error {
	const synopsis = "QUEUE --state done|dead|cancelled [--yes]"
	fs := newFlags(e, "purge", synopsis)
	var rf redisFlags
	rf.register(fs)
	state := fs.String("state", "", "the finished state to purge: done, dead or cancelled (required)")
	yes := fs.Bool("yes", false, "purge without asking first")
	pos, err := parse(fs, synopsis, args, 1, 1)
	if err != nil {
		return err
	}
	st := broker.State(*state)
	switch {
	case *state == "":
		return usagef("missing --state: give done, dead or cancelled (e.g. --state dead)")
	case !st.Final():
		return usagef("--state %s: purge takes done, dead or cancelled; delete a %s job one at a time with workerd delete QUEUE ID", *state, *state)
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	q := pos[0]
	if err := requireQueue(ctx, b.Inspector(), q, ""); err != nil {
		return err
	}
	c, err := b.Inspector().Counts(ctx, q)
	if err != nil {
		return err
	}
	n := map[broker.State]int64{broker.StateDone: c.Done, broker.StateDead: c.Dead, broker.StateCancelled: c.Cancelled}[st]
	if n == 0 {
		fmt.Fprintf(e.stdout, "no %s jobs in %s: nothing to purge\n", st, q)
		return nil
	}
	if !*yes {
		fmt.Fprintf(e.stdout, "This deletes the %d %s job(s) of %s, for good. Type yes to go on: ", n, st, q)
		line, _ := bufio.NewReader(e.stdin).ReadString('\n')
		if strings.TrimSpace(line) != "yes" {
			fmt.Fprintln(e.stdout)
			fmt.Fprintln(e.stderr, "nothing deleted: answer yes to purge, or pass --yes")
			return errFailed
		}
	}
	last := time.Now()
	p, err := b.Inspector().Purge(ctx, q, st, func(p broker.PurgeProgress) {
		if !p.Done && time.Since(last) >= time.Second {
			last = time.Now()
			fmt.Fprintf(e.stdout, "deleted %d of about %d...\n", p.Deleted, n)
		}
	})
	if p.Deleted > 0 || err == nil {
		fmt.Fprintf(e.stdout, "purged %d %s job(s) of %s", p.Deleted, st, q)
		if p.Skipped > 0 {
			fmt.Fprintf(e.stdout, "; %d left, no longer %s when the purge reached them", p.Skipped, st)
		}
		if p.Recent > 0 {
			fmt.Fprintf(e.stdout, "; %d left that finished in the last %s (a lost reply's re-send may still come for them): purge again in a few seconds", p.Recent, broker.ResendHorizon)
		}
		fmt.Fprintln(e.stdout)
	}
	if err != nil {
		return fmt.Errorf("purge stopped: %w; run it again to go on", err)
	}
	return nil
}

// runPromote runs a scheduled job now.
func runPromote(ctx context.Context, e *env, args []string) error {
	b, pos, err := positional(ctx, e, "promote", "QUEUE ID", args)
	if err != nil {
		return err
	}
	if err := b.Inspector().Promote(ctx, pos[0], pos[1]); err != nil {
		return jobError(ctx, e, b.Inspector(), pos[0], err)
	}
	fmt.Fprintf(e.stdout, "promoted %s: pending now, it runs at the next free slot\n", pos[1])
	return nil
}

func validState(s string) bool {
	for _, st := range broker.States {
		if string(st) == s {
			return true
		}
	}
	return false
}
