package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

const enqueueSynopsis = "QUEUE KIND [--payload JSON | --payload @FILE | --payload -] [--id ID] [--delay D | --at RFC3339] [--max-attempts N] [--priority P] [--unique KEY [--unique-for D]] [--after ID]... [--meta KEY=VALUE]... [--group G] [--wait[=D]]\n       workerd enqueue QUEUE --jsonl FILE|-"

func runEnqueue(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "enqueue", enqueueSynopsis)
	var rf redisFlags
	rf.register(fs)
	payload := fs.String("payload", "", "the payload: JSON text, @FILE to read a file, or - to read standard input (default {})")
	raw := fs.Bool("raw", false, "send the payload as it is, without checking that it is JSON")
	id := fs.String("id", "", "job id (default: a new UUID); enqueueing an id twice is refused, so a retried enqueue is safe")
	delay := fs.Duration("delay", 0, "run the job this long from now")
	at := fs.String("at", "", "run the job at this time (RFC 3339, e.g. 2026-12-01T09:00:00Z)")
	maxAttempts := fs.Int("max-attempts", 0, fmt.Sprintf("attempts before the job is dead (default %d)", broker.MaxAttemptsDefault))
	priority := fs.Int("priority", 0, fmt.Sprintf("priority from %d to %d; higher runs first", broker.PriorityMin, broker.PriorityMax))
	unique := fs.String("unique", "", "unique key: while a job with this key exists (or for --unique-for), enqueueing another answers its id and makes none")
	var after stringList
	fs.Var(&after, "after", "run only once this job (of the same queue) is done; repeat for several")
	meta := metaFlag{}
	fs.Var(meta, "meta", fmt.Sprintf("a metadata entry KEY=VALUE carried with the job (a request id, a tenant); repeat for several, at most %d bytes in all", broker.MaxMetadataBytes))
	group := fs.String("group", "", fmt.Sprintf("the job's group: a tenant, a customer, an API key (at most %d bytes)", broker.MaxGroupBytes))
	runIfFails := fs.Bool("run-if-dependency-fails", false, "with --after: run even when a dependency ends dead or cancelled (default: cancel this job)")
	var wait waitFlag
	fs.Var(&wait, "wait", "wait until the job is done, dead or cancelled, and print it as JSON (exit 1 unless done); --wait=30s waits at most 30s, then prints the job as it is and exits 1")
	uniqueFor := fs.Duration("unique-for", 0, "hold the unique key this long instead of until the job is done, dead or cancelled")
	jsonl := fs.String("jsonl", "", `enqueue every line of FILE (or - for standard input), each a job's JSON form: {"kind": …, "payload": …, "id": …, "delay": "5s" (or "delay_ms": 5000), "at": RFC 3339 (or "run_at_ms"), "max_attempts": …, "priority": …, "unique_key": …, "unique_for": "1h" (or "unique_for_ms"), "depends_on": [ids…], "run_if_dependency_fails": true, "metadata": {"key": "value", …}, "group": …}; a line whose unique key is held is reported, not failed`)
	pos, err := parse(fs, enqueueSynopsis, args, 1, -1)
	if err != nil {
		return err
	}
	if len(pos) > 2 {
		if _, derr := time.ParseDuration(pos[2]); derr == nil && wait.on {
			return usagef("unexpected arguments: %s; to wait at most %s, write --wait=%s (with '=')", strings.Join(pos[2:], " "), pos[2], pos[2])
		}
		return usagef("unexpected arguments: %s", strings.Join(pos[2:], " "))
	}
	queue := pos[0]
	if *jsonl != "" {
		if len(pos) > 1 {
			return usagef("--jsonl takes the kind from each line; give only the queue")
		}
		if err := broker.ValidateQueue(queue); err != nil {
			return usagef("%v", err) // before a line is read: every line would fail
		}
		b, flushSpans, err := connectTraced(ctx, e, &rf)
		if err != nil {
			return err
		}
		defer flushSpans()
		return enqueueJSONL(ctx, e, b, queue, *jsonl)
	}
	if len(pos) < 2 {
		return usagef("missing the job kind; usage: workerd enqueue %s", firstLine(enqueueSynopsis))
	}
	j := broker.Job{Queue: queue, Kind: pos[1], ID: *id, Delay: *delay, MaxAttempts: *maxAttempts, Priority: *priority,
		UniqueKey: *unique, UniqueFor: *uniqueFor, DependsOn: after, RunIfDependencyFails: *runIfFails, Metadata: meta,
		Group: *group}
	if j.Payload, err = readPayload(e, *payload, *raw); err != nil {
		return err
	}
	if *at != "" {
		if *delay != 0 {
			return usagef("give --delay or --at, not both")
		}
		if j.RunAt, err = time.Parse(time.RFC3339, *at); err != nil {
			return usagef("bad --at %q: want an RFC 3339 time such as 2026-12-01T09:00:00Z", *at)
		}
	}
	b, flushSpans, err := connectTraced(ctx, e, &rf)
	if err != nil {
		return err
	}
	defer flushSpans()
	got := b.Client().EnqueueMany(ctx, []broker.Job{j})[0]
	switch {
	case errors.Is(got.Err, broker.ErrUniqueHeld):
		// The holder's id is what the caller wants: the job that will run.
		fmt.Fprintf(e.stderr, "unique key %q is held by job %s: nothing enqueued\n", j.UniqueKey, got.ID)
	case errors.Is(got.Err, broker.ErrInvalid):
		return usagef("%v", got.Err)
	case got.Err != nil:
		return got.Err
	}
	if !wait.on {
		fmt.Fprintln(e.stdout, got.ID)
		return nil
	}
	wctx := ctx
	if wait.timeout > 0 {
		var cancel context.CancelFunc
		wctx, cancel = context.WithTimeout(ctx, wait.timeout)
		defer cancel()
	}
	info, err := b.Client().Wait(wctx, queue, got.ID)
	if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
		// The job goes on: show it as it is now.
		if info, err = b.Inspector().Job(ctx, queue, got.ID); err != nil {
			return err
		}
		if err := printJSON(e.stdout, jobToJSON(info)); err != nil {
			return err
		}
		return fmt.Errorf("job %s is still %s after --wait=%v; it goes on ('workerd inspect job %s %s' shows it)", got.ID, info.State, wait.timeout, queue, got.ID)
	}
	if err != nil {
		return err
	}
	if err := printJSON(e.stdout, jobToJSON(info)); err != nil {
		return err
	}
	if info.State != broker.StateDone {
		return errFailed
	}
	return nil
}

// readPayload reads --payload: inline JSON, @file or - for stdin.
func readPayload(e *env, spec string, raw bool) ([]byte, error) {
	var data []byte
	switch {
	case spec == "":
		return []byte("{}"), nil
	case spec == "-":
		b, err := io.ReadAll(e.stdin)
		if err != nil {
			return nil, fmt.Errorf("read payload from standard input: %w", err)
		}
		data = b
	case strings.HasPrefix(spec, "@"):
		b, err := os.ReadFile(spec[1:])
		if err != nil {
			return nil, usagef("read payload file: %v", err)
		}
		data = b
	default:
		data = []byte(spec)
	}
	if !raw && !json.Valid(data) {
		return nil, usagef("the payload is not valid JSON (give --raw to send it as it is)")
	}
	return data, nil
}

const enqueueBatch = 500

// enqueueJSONL enqueues a file of jobs, one pipeline round trip per batch,
// with a progress line on a terminal. A bad line stops nothing: it is
// reported with its line number, and the command exits 1 at the end.
func enqueueJSONL(ctx context.Context, e *env, b *broker.Broker, queue, path string) error {
	in := e.stdin
	var size int64
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return usagef("open --jsonl file: %v", err)
		}
		defer f.Close()
		if st, err := f.Stat(); err == nil {
			size = st.Size()
		}
		in = f
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), broker.MaxPayloadBytesDefault+64<<10)
	tty := isTerminal(e.stderr)
	var (
		batch      []broker.Job
		lines      []int
		read       int64
		line, ok   int
		failed     int
		held       int
		lastReport time.Time
	)
	flush := func() {
		for i, r := range b.Client().EnqueueMany(ctx, batch) {
			switch {
			case errors.Is(r.Err, broker.ErrUniqueHeld):
				// Not a failure: the job the line asks for is the holder.
				held++
				fmt.Fprintf(e.stderr, "line %d: unique key %q is held by job %s: nothing enqueued\n", lines[i], batch[i].UniqueKey, r.ID)
			case r.Err != nil:
				failed++
				fmt.Fprintf(e.stderr, "line %d: %s\n", lines[i], onePrefix(r.Err))
			default:
				ok++
			}
		}
		batch, lines = batch[:0], lines[:0]
		if tty && time.Since(lastReport) > 100*time.Millisecond {
			lastReport = time.Now()
			if size > 0 {
				fmt.Fprintf(e.stderr, "\renqueued %d jobs (%d%%)", ok, read*100/size)
			} else {
				fmt.Fprintf(e.stderr, "\renqueued %d jobs", ok)
			}
		}
	}
	for sc.Scan() {
		line++
		read += int64(len(sc.Bytes())) + 1
		text := strings.TrimSpace(sc.Text())
		if text == "" {
			continue
		}
		j, err := parseJSONL(queue, []byte(text))
		if err != nil {
			failed++
			fmt.Fprintf(e.stderr, "line %d: %s\n", line, onePrefix(err))
			continue
		}
		batch, lines = append(batch, j), append(lines, line)
		if len(batch) == enqueueBatch {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
	if tty {
		fmt.Fprintln(e.stderr)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read --jsonl after line %d: %w", line, err)
	}
	if held > 0 {
		fmt.Fprintf(e.stdout, "enqueued %d jobs, %d failed, %d already held by a unique key\n", ok, failed, held)
	} else {
		fmt.Fprintf(e.stdout, "enqueued %d jobs, %d failed\n", ok, failed)
	}
	if failed > 0 {
		return errFailed
	}
	return nil
}

// parseJSONL reads one --jsonl line: a job in broker.Job's JSON form, in
// queue (a line may name it too, but no other). A job without a payload
// gets {}.
func parseJSONL(queue string, text []byte) (broker.Job, error) {
	var j broker.Job
	dec := json.NewDecoder(bytes.NewReader(text))
	if err := dec.Decode(&j); err != nil {
		if errors.Is(err, broker.ErrInvalid) {
			return broker.Job{}, err
		}
		return broker.Job{}, fmt.Errorf("not a job: %v", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return broker.Job{}, errors.New("not a job: more follows the job's JSON object; write one job per line")
	}
	switch j.Queue {
	case "":
		j.Queue = queue
	case queue:
	default:
		return broker.Job{}, fmt.Errorf("the line names queue %q, but this command enqueues into %q; give one queue per file", j.Queue, queue)
	}
	if len(j.Payload) == 0 {
		j.Payload = []byte("{}")
	}
	return j, nil
}

// waitFlag is --wait (until the job ends) or --wait=D (at most D).
type waitFlag struct {
	on      bool
	timeout time.Duration // 0: no limit
}

func (w *waitFlag) IsBoolFlag() bool { return true }

func (w *waitFlag) String() string {
	switch {
	case w == nil || !w.on:
		return "false"
	case w.timeout > 0:
		return w.timeout.String()
	}
	return "true"
}

func (w *waitFlag) Set(v string) error {
	switch v {
	case "true":
		*w = waitFlag{on: true}
		return nil
	case "false":
		*w = waitFlag{}
		return nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return fmt.Errorf("want --wait alone (until the job ends) or a positive duration with its unit, such as --wait=30s")
	}
	*w = waitFlag{on: true, timeout: d}
	return nil
}

// stringList is a repeatable string flag.
type stringList []string

// metaFlag is --meta KEY=VALUE, repeatable; the broker checks the entries
// and their size as it checks any job's.
type metaFlag map[string]string

func (m metaFlag) String() string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}

func (m metaFlag) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	switch {
	case !ok:
		return fmt.Errorf("%q has no '=': write KEY=VALUE, such as --meta tenant=acme", v)
	case k == "":
		return fmt.Errorf("%q has an empty key: write KEY=VALUE, such as --meta tenant=acme", v)
	}
	if old, dup := m[k]; dup {
		return fmt.Errorf("key %q is given twice (%q and %q): give each key once", k, old, val)
	}
	m[k] = val
	return nil
}

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }
