package main

import (
	"bytes"
	"context"
	"io"
	"regexp"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// beforeRead is a go-redis hook that calls fn with the number of each
// XREAD (1 for the first) just before it goes out: the seam between two
// reads of the follow loop, where events keep arriving.
type beforeRead struct {
	n  int
	fn func(n int)
}

func (h *beforeRead) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforeRead) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "xread" {
			h.n++
			h.fn(h.n)
		}
		return next(ctx, cmd)
	}
}

func (h *beforeRead) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// inspect --follow prints every event from the moment it starts, in order,
// also those that come while no XREAD is waiting: reading from "$" again
// after each empty wait would lose what came between two reads.
func TestFollowMissesNoEvent(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	bg := context.Background()
	if err := b.Inspector().SetEvents(bg, "q", 100); err != nil {
		t.Fatal(err)
	}
	enqueue := func(ids ...string) {
		for _, id := range ids {
			if _, err := b.Client().Enqueue(bg, broker.Job{Queue: "q", Kind: "k", ID: id}); err != nil {
				t.Error(err)
			}
		}
	}
	ctx, cancel := context.WithCancel(bg)
	defer cancel()
	rdb.AddHook(&beforeRead{fn: func(n int) {
		switch n {
		case 1:
			enqueue("ev-1") // after follow looked for recent events, before its first read
		case 2:
			enqueue("ev-2", "ev-3")
		default:
			cancel()
		}
	}})
	var out bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: io.Discard, getenv: func(string) string { return "" }}
	if err := followEvents(ctx, e, b.Inspector(), "q", false); err != nil {
		t.Fatal(err)
	}
	got := regexp.MustCompile(`enqueued +(ev-\d)`).FindAllStringSubmatch(out.String(), -1)
	var ids []string
	for _, m := range got {
		ids = append(ids, m[1])
	}
	if strings.Join(ids, " ") != "ev-1 ev-2 ev-3" {
		t.Fatalf("follow printed the events of %v, want ev-1 ev-2 ev-3; its output:\n%s", ids, out.String())
	}
}
