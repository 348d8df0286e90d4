package brokertest

import (
	"context"
	"slices"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// Calls in a row on two queues answer each for its own queue: on a server
// with FUNCTION the operations share one loaded library, whose upvalues
// live from one call to the next, so every call must start from nothing
// of the last one's (lib.lua's begin): its queue's keys, and the settings
// it read (a concurrency limit, events on) of another queue.
func testPerCallState(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	const other = "other"
	var mine, theirs []string
	for range 4 {
		mine = append(mine, s.enqueue(t, broker.Job{}))
		theirs = append(theirs, s.enqueue(t, broker.Job{Queue: other}))
	}
	noErr(t, "SetLimits", s.b.Inspector().SetLimits(s.ctx, s.q, broker.Limits{MaxRunning: 1}))
	noErr(t, "SetEvents", s.b.Inspector().SetEvents(s.ctx, s.q, 100))
	for round := range 2 {
		got := s.claim(t, 5, long)
		want(t, "claimed under MaxRunning 1", len(got), 1-round) // the second finds the slot taken
		res, err := s.b.Leases().Claim(s.ctx, other, 2, long)
		noErr(t, "Claim of the other queue", err)
		want(t, "claimed in the other queue, which has no limit", len(res.Leases), 2)
		for _, l := range res.Leases {
			if l.Queue != other || !slices.Contains(theirs, l.ID) {
				t.Fatalf("a claim of queue %q took %s of %q", other, l.ID, l.Queue)
			}
		}
	}
	for _, id := range mine[1:] {
		want(t, "state of a job over the limit", s.job(t, id).State, broker.StatePending)
	}
	evs, err := s.b.Inspector().Events(s.ctx, other, "0", 100, 0)
	noErr(t, "Events of the other queue", err)
	want(t, "events of the other queue, which has them off", len(evs), 0)
	evs, err = s.b.Inspector().Events(s.ctx, s.q, "0", 100, 0)
	noErr(t, "Events", err)
	if len(evs) == 0 {
		t.Fatal("no events in the queue that has them on")
	}
}

// A server that loses the library between calls (FUNCTION DELETE or
// FLUSH, a restart without persistence, a new master) answers "Function
// not found": nothing ran, and the broker loads it again and goes on, for
// a call alone and a pipeline of them. Without FUNCTION the broker sends
// EVALSHA and has no library. (The library is the server's, shared by the
// tests that run meanwhile: a call that finds it gone again right after
// loading it runs by EVAL.)
func testLibraryDeleted(t *testing.T, nb NewBackend) {
	s := setup(t, nb)
	id := s.enqueue(t, broker.Job{})
	lib := s.b.FunctionLibrary()
	drop := func() {
		t.Helper()
		if lib == "" {
			return // EVALSHA: ScriptFlush tests that path
		}
		del := func(ctx context.Context, c redis.Cmdable) error {
			err := c.FunctionDelete(ctx, lib).Err()
			if err != nil && err.Error() == "ERR Library not found" {
				return nil
			}
			return err
		}
		var err error
		if cc, ok := s.Client.(*redis.ClusterClient); ok {
			err = cc.ForEachMaster(s.ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
		} else {
			err = del(s.ctx, s.Client)
		}
		noErr(t, "FUNCTION DELETE", err)
	}
	drop()
	es := s.b.Client().EnqueueMany(s.ctx, []broker.Job{{Queue: s.q, Kind: "k"}, {Queue: "second", Kind: "k"}})
	for _, e := range es {
		noErr(t, "EnqueueMany after FUNCTION DELETE", e.Err)
	}
	drop()
	ls := s.claim(t, 2, long)
	want(t, "claimed after FUNCTION DELETE", len(ls), 2)
	drop()
	rs, err := s.b.Leases().Renew(s.ctx, ls, long)
	noErr(t, "Renew after FUNCTION DELETE", err)
	for _, r := range rs {
		want(t, "renew outcome", r.Outcome, broker.OK)
	}
	drop()
	os, err := s.b.Leases().AckMany(s.ctx, []broker.Ack{{Lease: ls[0]}, {Lease: ls[1]}})
	noErr(t, "AckMany after FUNCTION DELETE", err)
	for _, o := range os {
		want(t, "ack outcome", o, broker.OK)
	}
	if lib != "" {
		drop()
		loaded, err := s.b.ScriptsLoaded(s.ctx)
		noErr(t, "ScriptsLoaded", err)
		want(t, "loaded after FUNCTION DELETE", loaded, false)
	}
	noErr(t, "LoadScripts", s.b.LoadScripts(s.ctx))
	loaded, err := s.b.ScriptsLoaded(s.ctx)
	noErr(t, "ScriptsLoaded", err)
	want(t, "loaded after LoadScripts", loaded, true)
	want(t, "state", s.job(t, id).State, broker.StateDone)
}
