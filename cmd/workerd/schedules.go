package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// scheduleJSON is one schedule of `workerd schedules --json`. The names
// are stable: scripts read them.
type scheduleJSON struct {
	Name     string          `json:"name"`
	Source   string          `json:"source"` // "redis" or "config"
	Cron     string          `json:"cron,omitempty"`
	Every    string          `json:"every,omitempty"` // a Go duration: "1h0m0s"
	Spec     string          `json:"spec"`
	Job      json.RawMessage `json:"job,omitempty"` // the job codec's JSON form
	CatchUp  bool            `json:"catch_up"`
	Paused   bool            `json:"paused"`
	Shadowed bool            `json:"shadowed,omitempty"`
	Problem  string          `json:"problem,omitempty"`
	Since    string          `json:"since,omitempty"`
	Next     string          `json:"next,omitempty"`
	LastRun  string          `json:"last_run,omitempty"`
	LastJob  string          `json:"last_job,omitempty"`
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339)
}

func toScheduleJSON(s broker.ScheduleInfo) scheduleJSON {
	out := scheduleJSON{Name: s.Name, Source: string(s.Source), Cron: s.Cron, Spec: s.Spec(), CatchUp: s.CatchUp,
		Paused: s.Paused, Shadowed: s.Shadowed, Problem: s.Problem, Since: stamp(s.Since), Next: stamp(s.Next),
		LastRun: stamp(s.LastRun), LastJob: s.LastJob}
	if s.Every > 0 {
		out.Every = s.Every.String()
	}
	if job, err := json.Marshal(s.Job); err == nil {
		out.Job = job
	}
	return out
}

const schedulesSynopsis = "[--json]"

// runSchedules lists every schedule: those stored in Redis and those of
// the running pools' configurations.
func runSchedules(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "schedules", schedulesSynopsis)
	var rf redisFlags
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print a JSON array, one object per schedule")
	if _, err := parse(fs, schedulesSynopsis, args, 0, 0); err != nil {
		return err
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	list, err := b.Schedules().List(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := make([]scheduleJSON, 0, len(list))
		for _, s := range list {
			out = append(out, toScheduleJSON(s))
		}
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	if len(list) == 0 {
		fmt.Fprintln(e.stdout, "no schedules: add one with workerd schedule add, or list periodic jobs in workerd.yaml")
		return nil
	}
	printSchedules(e.stdout, list)
	return nil
}

func printSchedules(w io.Writer, list []broker.ScheduleInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSOURCE\tSPEC\tJOB\tNEXT (UTC)\tLAST RUN (UTC)\tSTATE")
	for _, s := range list {
		next, last := "-", "never"
		if !s.Next.IsZero() {
			next = s.Next.UTC().Format(time.DateTime)
		}
		if !s.LastRun.IsZero() {
			last = s.LastRun.UTC().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\t%s\t%s\n", s.Name, s.Source, s.Spec(), s.Job.Queue, s.Job.Kind, next, last, scheduleState(s))
	}
	_ = tw.Flush()
}

func scheduleState(s broker.ScheduleInfo) string {
	switch {
	case s.Problem != "":
		return "unreadable: " + s.Problem
	case s.Shadowed:
		return "ignored: a pool's config has this name"
	case s.Paused:
		return "paused"
	}
	return "active"
}

const scheduleSynopsis = "add NAME (--every D | --cron EXPR) (--job JSON | --queue Q --kind K [--payload JSON]) [--catch-up]\n" +
	"       set NAME [--every D | --cron EXPR] [--job JSON] [--queue Q] [--kind K] [--payload JSON] [--catch-up[=false]]\n" +
	"       pause NAME | resume NAME | rm NAME"

// runSchedule adds, changes, pauses, resumes or removes a schedule
// stored in Redis.
func runSchedule(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "schedule", scheduleSynopsis)
	var rf redisFlags
	rf.register(fs)
	every := fs.Duration("every", 0, "run every D (at least 1s; ticks fall on multiples of D since the Unix epoch), e.g. 5m")
	cronExpr := fs.String("cron", "", `run on a cron expression in UTC: five fields, six with seconds first, or "@hourly", "@daily", "@every 90s"`)
	jobJSON := fs.String("job", "", `each tick's job in the job's JSON form, e.g. '{"queue":"mail","kind":"digest","payload":{"to":"ops"}}' (every field but id)`)
	queue := fs.String("queue", "", "each tick's job's queue (over --job's)")
	kind := fs.String("kind", "", "each tick's job's kind (over --job's)")
	payload := fs.String("payload", "", "each tick's job's payload, JSON (over --job's)")
	catchUp := fs.Bool("catch-up", false, "when a pool starts, enqueue the latest tick missed while no pool ran")
	pos, err := parse(fs, scheduleSynopsis, args, 0, 2)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("missing the action: give add, set, pause, resume or rm, then the schedule's name")
	}
	verb := pos[0]
	if len(pos) < 2 {
		if !isScheduleVerb(verb) {
			return usagef("unknown action %q: give add, set, pause, resume or rm, then the schedule's name", verb)
		}
		return usagef("missing NAME; usage: workerd schedule %s NAME", verb)
	}
	name := pos[1]
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	if !isScheduleVerb(verb) {
		return usagef("unknown action %q: give add, set, pause, resume or rm", verb)
	}
	if verb != "add" && verb != "set" {
		for _, f := range []string{"every", "cron", "job", "queue", "kind", "payload", "catch-up"} {
			if given[f] {
				return usagef("--%s is for add and set; %s takes only the schedule's name", f, verb)
			}
		}
	}
	if given["every"] && given["cron"] {
		return usagef("--every and --cron exclude each other: give one")
	}
	if given["every"] && *every < broker.ScheduleEveryMin {
		return usagef("--every %v: give at least %v, written with a unit, like 30s or 5m", *every, broker.ScheduleEveryMin)
	}
	if len(*jobJSON) > broker.ScheduleJobMaxBytes || len(*payload) > broker.ScheduleJobMaxBytes {
		return usagef("--job or --payload is over %d bytes, the most a schedule's job may be: store large data elsewhere and put a reference in the payload", broker.ScheduleJobMaxBytes)
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	sc := b.Schedules()
	switch verb {
	case "pause":
		err = sc.Pause(ctx, name)
	case "resume":
		err = sc.Resume(ctx, name)
	case "rm":
		err = sc.Remove(ctx, name)
	case "add":
		if !given["every"] && !given["cron"] {
			return usagef("add needs --every D or --cron EXPR")
		}
		s := broker.Schedule{Name: name, Every: *every, Cron: *cronExpr, CatchUp: *catchUp}
		if s.Job, err = scheduleJob(broker.Job{}, *jobJSON, given, *queue, *kind, *payload); err != nil {
			return err
		}
		err = sc.Add(ctx, s)
	case "set":
		var cur broker.ScheduleInfo
		cur, err = sc.Get(ctx, name)
		if err == nil && cur.Source != broker.SourceRedis {
			err = fmt.Errorf("schedule %q comes from a running pool's configuration (workerd.yaml), which Redis cannot change; change it there", name)
		}
		if err != nil {
			break
		}
		s := cur.Schedule
		if given["every"] || given["cron"] {
			s.Every, s.Cron = *every, *cronExpr
		}
		if given["catch-up"] {
			s.CatchUp = *catchUp
		}
		base := s.Job
		if given["job"] {
			base = broker.Job{}
		}
		if s.Job, err = scheduleJob(base, *jobJSON, given, *queue, *kind, *payload); err != nil {
			return err
		}
		err = sc.Set(ctx, s)
	}
	if err != nil {
		return scheduleError(err)
	}
	switch verb {
	case "add":
		fmt.Fprintf(e.stdout, "added schedule %s: every pool fires it within %v\n", name, schedulePollText)
	case "set":
		fmt.Fprintf(e.stdout, "changed schedule %s: its ticks from now are the new definition's\n", name)
	case "pause":
		fmt.Fprintf(e.stdout, "paused schedule %s: no tick of it fires until it is resumed\n", name)
	case "resume":
		fmt.Fprintf(e.stdout, "resumed schedule %s: its next tick fires; those missed while paused do not\n", name)
	case "rm":
		fmt.Fprintf(e.stdout, "removed schedule %s: its jobs already enqueued stay\n", name)
	}
	return nil
}

// schedulePollText is how soon pools see a change, as the user reads it.
const schedulePollText = "5 seconds (schedule_poll in workerd.yaml, worker.Config.SchedulePoll)"

func isScheduleVerb(v string) bool {
	switch v {
	case "add", "set", "pause", "resume", "rm":
		return true
	}
	return false
}

// scheduleJob is the job template the flags describe: --job's JSON form
// (or base without it), then --queue, --kind and --payload over it.
func scheduleJob(base broker.Job, jobJSON string, given map[string]bool, queue, kind, payload string) (broker.Job, error) {
	j := base
	if given["job"] {
		if err := j.UnmarshalJSON([]byte(jobJSON)); err != nil {
			return j, usagef("--job: %v", strings.TrimPrefix(err.Error(), "fenceq: "))
		}
	}
	if given["queue"] {
		j.Queue = queue
	}
	if given["kind"] {
		j.Kind = kind
	}
	if given["payload"] {
		if !json.Valid([]byte(payload)) {
			return j, usagef("--payload %q is not JSON; quote a string as JSON too, e.g. '\"text\"', or give an object: '{\"to\": \"ops\"}'", short(payload))
		}
		j.Payload = []byte(payload)
	}
	if j.Queue == "" || j.Kind == "" {
		return j, usagef("each tick's job needs a queue and a kind: give --queue Q --kind K, or --job with both")
	}
	return j, nil
}

func short(s string) string {
	if len(s) <= 64 {
		return s
	}
	return s[:61] + "..."
}

// scheduleError turns the store's refusals into what the user reads: a
// bad argument is a usage error, a missing schedule a failure.
func scheduleError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "fenceq: ")
	switch {
	case errors.Is(err, broker.ErrInvalid):
		return usagef("%s", msg)
	case errors.Is(err, broker.ErrScheduleNotFound), errors.Is(err, broker.ErrScheduleExists), errors.Is(err, broker.ErrScheduleFromConfig):
		return errors.New(msg)
	}
	return err
}
