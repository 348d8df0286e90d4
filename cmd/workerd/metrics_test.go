package main

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/version"
)

// infoMemory answers INFO memory with a canned reply, or an error, in
// place of the server: miniredis has no memory section.
type infoMemory struct {
	reply string
	err   error
}

func (h infoMemory) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h infoMemory) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (h infoMemory) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); len(args) == 2 && cmd.Name() == "info" && args[1] == "memory" {
			if h.err != nil {
				cmd.SetErr(h.err)
				return h.err
			}
			cmd.(*redis.StringCmd).SetVal(h.reply)
			return nil
		}
		return next(ctx, cmd)
	}
}

// gauges scrapes m and answers each sample of name as "label=value".
func gauges(t *testing.T, m *workerdMetrics, name string) ([]string, error) {
	t.Helper()
	mfs, err := m.reg.Gather()
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out = append(out, strings.Join(labels, ",")+" "+strconv.FormatFloat(s.GetGauge().GetValue(), 'f', -1, 64))
		}
	}
	return out, err
}

// /metrics exports each server's used_memory and maxmemory, read at the
// scrape; a server that cannot report them leaves the gauges out without
// failing the scrape; a failed read fails it.
func TestMetricsRedisMemory(t *testing.T) {
	mr := miniredis.RunT(t)
	setup := func(h redis.Hook) *workerdMetrics {
		rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = rdb.Close() })
		if h != nil {
			rdb.AddHook(h)
		}
		b, err := broker.New(rdb, broker.Options{})
		if err != nil {
			t.Fatal(err)
		}
		return newMetrics(b, []string{"q"})
	}

	t.Run("read at the scrape", func(t *testing.T) {
		m := setup(infoMemory{reply: "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:268435456\r\nmaxmemory_policy:noeviction\r\n"})
		used, err := gauges(t, m, "fenceq_redis_used_memory_bytes")
		if err != nil || len(used) != 1 || used[0] != "node="+mr.Addr()+" 1048576" {
			t.Fatalf("used memory %v, %v", used, err)
		}
		maxm, err := gauges(t, m, "fenceq_redis_maxmemory_bytes")
		if err != nil || len(maxm) != 1 || maxm[0] != "node="+mr.Addr()+" 268435456" {
			t.Fatalf("maxmemory %v, %v", maxm, err)
		}
	})
	t.Run("a server that cannot say", func(t *testing.T) {
		m := setup(nil) // miniredis: "section (memory) is not supported"
		used, err := gauges(t, m, "fenceq_redis_used_memory_bytes")
		if err != nil || len(used) != 0 {
			t.Fatalf("used memory %v, %v: want no gauge and a scrape that works", used, err)
		}
		if depth, _ := gauges(t, m, "fenceq_queue_jobs"); len(depth) == 0 {
			t.Fatal("the rest of the scrape is missing")
		}
	})
	t.Run("a read that fails", func(t *testing.T) {
		m := setup(infoMemory{err: errors.New("i/o timeout")})
		if _, err := gauges(t, m, "fenceq_redis_used_memory_bytes"); err == nil || !strings.Contains(err.Error(), "i/o timeout") {
			t.Fatalf("scrape error %v, want the failed read", err)
		}
	})
}

// /metrics carries the fenceq version and, per configured queue, the age
// of its oldest pending job and its counters read from Redis.
func TestMetricsVersionAndQueueFigures(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Client().Enqueue(t.Context(), broker.Job{Queue: "q", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	m := newMetrics(b, []string{"q"})
	mfs, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]string{}
	for _, mf := range mfs {
		for _, s := range mf.GetMetric() {
			var labels []string
			for _, l := range s.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			found[mf.GetName()] = strings.Join(labels, ",")
		}
	}
	if l, ok := found["fenceq_build_info"]; !ok || !strings.Contains(l, "version="+version.String()) {
		t.Errorf("fenceq_build_info %q (present %v), want version=%s", l, ok, version.String())
	}
	for _, name := range []string{"fenceq_queue_oldest_pending_age_seconds", "fenceq_queue_succeeded_total", "fenceq_queue_failed_total", "fenceq_queue_dead_total"} {
		if l := found[name]; l != "queue=q" {
			t.Errorf("%s labels %q, want queue=q", name, l)
		}
	}
}
