package main

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/fenceq/fenceq/broker"
)

const workersSynopsis = "[--json]"

// workersJSON is what `workerd workers --json` prints: the live pools as
// the registry holds them (broker.WorkerInfo's field names, times in
// RFC 3339 on the Redis clock), and that clock when they were read.
type workersJSON struct {
	Now     time.Time           `json:"now"`
	Workers []broker.WorkerInfo `json:"workers"`
	// Truncated: the registry held more pools than a listing reads
	// (broker.MaxWorkersListed); Indexed says how many, live or lately
	// expired.
	Truncated bool  `json:"truncated"`
	Indexed   int64 `json:"indexed"`
}

// runWorkers lists the live pools of the worker registry.
func runWorkers(ctx context.Context, e *env, args []string) error {
	fs := newFlags(e, "workers", workersSynopsis)
	var rf redisFlags
	rf.register(fs)
	asJSON := fs.Bool("json", false, "print one JSON object: the live pools, each with its running jobs")
	if _, err := parse(fs, workersSynopsis, args, 0, 0); err != nil {
		return err
	}
	_, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	ws, err := b.Inspector().Workers(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		out := workersJSON{Now: ws.Now.UTC(), Workers: []broker.WorkerInfo{}, Truncated: ws.Truncated(), Indexed: ws.Indexed}
		for _, w := range ws.Workers {
			if w.Jobs == nil {
				w.Jobs = []broker.RunningJob{}
			}
			out.Workers = append(out.Workers, w)
		}
		return printJSON(e.stdout, out)
	}
	if len(ws.Workers) == 0 {
		fmt.Fprintln(e.stdout, "no live pools: none has refreshed its entry in the worker registry within its TTL (a pool registers when it starts)")
		return nil
	}
	tw := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "POOL\tHOST\tPID\tVERSION\tQUEUES\tRUNNING\tSTARTED\tSEEN")
	running, slots := 0, 0
	for _, w := range ws.Workers {
		qs := strings.Join(w.Queues, ",")
		if more := w.QueueCount - len(w.Queues); more > 0 {
			qs += fmt.Sprintf(" +%d", more)
		}
		load := fmt.Sprintf("%d/%d", w.Running, w.Concurrency)
		if w.Stopping {
			load += " stopping"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s ago\n", cmp.Or(w.Name, w.ID), w.Host, w.PID, w.Version, qs,
			load, w.StartedAt.UTC().Format("2006-01-02 15:04:05"), ws.Now.Sub(w.SeenAt).Round(time.Second))
		running += w.Running
		slots += w.Concurrency
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%d live pool(s), running %d of %d slots; times UTC, Redis clock. workerd inspect QUEUE shows which pool holds each lease.\n",
		len(ws.Workers), running, slots)
	if ws.Truncated() {
		fmt.Fprintf(e.stderr, "Only the first %d are listed: the registry holds %d pools (some may have expired lately), and a listing reads at most %d; the counts above are of those listed.\n",
			len(ws.Workers), ws.Indexed, broker.MaxWorkersListed)
	}
	return nil
}
