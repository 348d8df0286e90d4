package bench

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// GroupsOptions is `workerd bench --groups N`: instead of the
// measurements, an A/B of a pool draining no-op jobs without groups and
// with the jobs spread over Groups groups (no group limits), the two
// alternated Rounds times.
type GroupsOptions struct {
	Groups      int // groups the jobs are spread over (job i in group i mod Groups)
	Rounds      int // A/B rounds
	Concurrency int // the pool's concurrency
}

// GroupsResult is what `workerd bench --groups N --json` prints. Field
// names are stable: scripts track them. The per-job Redis figures come
// from INFO commandstats read before and after each run (not reset): they
// count whatever else that Redis ran meanwhile, so they mean something
// only on a Redis nothing else uses.
type GroupsResult struct {
	Groups      int         `json:"groups"`
	Jobs        int         `json:"jobs"`
	Concurrency int         `json:"concurrency"`
	Rounds      int         `json:"rounds"`
	Ungrouped   []GroupsRun `json:"ungrouped"`
	Grouped     []GroupsRun `json:"grouped"`
	// Medians over the rounds, and the grouped median over the ungrouped.
	UngroupedPerS float64 `json:"ungrouped_per_s"`
	GroupedPerS   float64 `json:"grouped_per_s"`
	Ratio         float64 `json:"ratio"`
}

// GroupsRun is one pool's drain of the jobs.
type GroupsRun struct {
	PerS float64 `json:"per_s"`
	// Every command Redis ran per job while the pool drained the jobs
	// (enqueued before, not counted), those inside scripts included; the
	// script calls per job; their µs per job and per call.
	RedisCommandsPerJob float64 `json:"redis_commands_per_job"`
	ScriptCallsPerJob   float64 `json:"script_calls_per_job"`
	ScriptUsecPerJob    float64 `json:"script_usec_per_job"`
	ScriptUsecPerCall   float64 `json:"script_usec_per_call"`
}

// scriptCommands are the commands that run a script or a function.
var scriptCommands = []string{"eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"}

// groupsAB runs the A/B: each round drains jobs no-op jobs without groups
// and over o.Groups groups, in an order that alternates, so that a drift
// of the machine's load falls on both.
func (bn *Bencher) groupsAB(jobs int, o GroupsOptions, progress func(string)) (GroupsResult, error) {
	r := GroupsResult{Groups: o.Groups, Jobs: jobs, Concurrency: o.Concurrency, Rounds: o.Rounds}
	for round := range o.Rounds {
		order := []int{0, o.Groups}
		if round%2 == 1 {
			order = []int{o.Groups, 0}
		}
		for _, groups := range order {
			progress(fmt.Sprintf("round %d of %d: process no-op, concurrency %d, over %d groups", round+1, o.Rounds, o.Concurrency, groups))
			run, err := bn.groupsRun(o.Concurrency, jobs, groups)
			if err != nil {
				return r, err
			}
			if groups == 0 {
				r.Ungrouped = append(r.Ungrouped, run)
			} else {
				r.Grouped = append(r.Grouped, run)
			}
		}
	}
	r.UngroupedPerS, r.GroupedPerS = medianPerS(r.Ungrouped), medianPerS(r.Grouped)
	if r.UngroupedPerS > 0 {
		r.Ratio = r.GroupedPerS / r.UngroupedPerS
	}
	return r, nil
}

// groupsRun is one drain, with the server's command counts around it
// (the enqueue before it not counted; the pool's start and shutdown are).
func (bn *Bencher) groupsRun(conc, jobs, groups int) (GroupsRun, error) {
	var before map[string]commandStat
	p, err := bn.processGroups(conc, jobs, 0, groups, func() (err error) {
		before, err = bn.commandStats()
		return err
	})
	if err != nil {
		return GroupsRun{}, err
	}
	after, err := bn.commandStats()
	if err != nil {
		return GroupsRun{}, err
	}
	run := GroupsRun{PerS: p.PerS}
	var calls, usec, all float64
	for name, a := range after {
		d := a.sub(before[name])
		all += d.calls
		if slices.Contains(scriptCommands, name) {
			calls += d.calls
			usec += d.usec
		}
	}
	run.RedisCommandsPerJob = all / float64(jobs)
	run.ScriptCallsPerJob = calls / float64(jobs)
	run.ScriptUsecPerJob = usec / float64(jobs)
	if calls > 0 {
		run.ScriptUsecPerCall = usec / calls
	}
	return run, nil
}

func medianPerS(runs []GroupsRun) float64 {
	if len(runs) == 0 {
		return 0
	}
	v := make([]float64, len(runs))
	for i, r := range runs {
		v[i] = r.PerS
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

// commandStat is one command's line of INFO commandstats.
type commandStat struct{ calls, usec float64 }

func (a commandStat) sub(b commandStat) commandStat {
	return commandStat{a.calls - b.calls, a.usec - b.usec}
}

// commandStats reads INFO commandstats (without resetting it).
func (bn *Bencher) commandStats() (map[string]commandStat, error) {
	info, err := bn.rdb.Info(bn.ctx, "commandstats").Result()
	if err != nil {
		return nil, fmt.Errorf("read INFO commandstats: %w", err)
	}
	return parseCommandStats(info), nil
}

// parseCommandStats reads "cmdstat_<name>:calls=N,usec=U,..." lines; a
// line it cannot read is left out.
func parseCommandStats(info string) map[string]commandStat {
	out := map[string]commandStat{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, fields, ok := strings.Cut(strings.TrimSpace(sc.Text()), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		var s commandStat
		for _, f := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				continue
			}
			switch k {
			case "calls":
				s.calls = n
			case "usec":
				s.usec = n
			}
		}
		out[name] = s
	}
	return out
}

func printGroups(w io.Writer, r GroupsResult) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "no-op jobs, concurrency %d, %d jobs a run, %d rounds\t\n", r.Concurrency, r.Jobs, r.Rounds)
	row := func(name string, runs []GroupsRun, median float64) {
		per := make([]string, len(runs))
		for i, x := range runs {
			per[i] = fmt.Sprintf("%.0f", x.PerS)
		}
		fmt.Fprintf(tw, "%s\t%.0f/s median (%s)\n", name, median, strings.Join(per, ", "))
		for i, x := range runs {
			fmt.Fprintf(tw, "  round %d\t%.2f Redis commands/job  %.3f script calls/job  %.1f µs script/job  %.0f µs/call\n",
				i+1, x.RedisCommandsPerJob, x.ScriptCallsPerJob, x.ScriptUsecPerJob, x.ScriptUsecPerCall)
		}
	}
	row("without groups", r.Ungrouped, r.UngroupedPerS)
	row(fmt.Sprintf("over %d groups", r.Groups), r.Grouped, r.GroupedPerS)
	fmt.Fprintf(tw, "grouped / ungrouped\t%.2f\n", r.Ratio)
	_ = tw.Flush()
}
