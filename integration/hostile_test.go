package integration

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

const hostileQueue = "hostile"

type hostileArgs struct {
	N int `json:"n"`
}

// hostileRig is one hostile case's broker, under its own prefix, and (when
// the case asks for one) a running pool with a JSON handler and a plain one.
type hostileRig struct {
	rdb    redis.UniversalClient
	b      *broker.Broker
	prefix string
	logs   syncBuffer
	okRuns atomic.Int64
}

var hostileSeq atomic.Int64

func newHostileRig(t *testing.T, rdb redis.UniversalClient) *hostileRig {
	t.Helper()
	r := &hostileRig{rdb: rdb, prefix: fmt.Sprintf("fqhostile-%d-%d", time.Now().UnixNano(), hostileSeq.Add(1))}
	t.Cleanup(func() {
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, r.prefix+":*").Result()
		if len(keys) > 0 {
			rdb.Del(ctx, keys...)
		}
	})
	var err error
	if r.b, err = broker.New(rdb, broker.Options{Prefix: r.prefix}); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *hostileRig) startPool(t *testing.T) {
	t.Helper()
	mux := handlers.NewMux()
	mux.Handle("hostile.json", handlers.JSON(func(ctx context.Context, job *handlers.Job, args hostileArgs) error {
		job.SetResult(fmt.Appendf(nil, `{"n":%d}`, args.N))
		return nil
	}))
	mux.HandleFunc("hostile.ok", func(ctx context.Context, job *handlers.Job) error {
		r.okRuns.Add(1)
		return nil
	})
	p, err := worker.New(r.b, mux, worker.Config{
		Queues: []worker.Queue{{Name: hostileQueue}}, Concurrency: 4,
		LeaseDuration: 300 * time.Millisecond, PollInterval: 50 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
		UnknownKind: worker.UnknownKindPolicy{Delay: 20 * time.Millisecond, MaxDelay: 50 * time.Millisecond, For: 200 * time.Millisecond},
		Logger:      slog.New(slog.NewTextHandler(&r.logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Shutdown(ctx); err != nil {
			t.Errorf("pool shutdown: %v", err)
		}
	})
}

func (r *hostileRig) jobKey(id string) string {
	return r.prefix + ":{" + hostileQueue + "}:job:" + id
}

func (r *hostileRig) enqueue(t *testing.T, j broker.Job) string {
	t.Helper()
	j.Queue = hostileQueue
	id, err := r.b.Client().Enqueue(context.Background(), j)
	if err != nil {
		t.Fatalf("enqueue %s: %v", j.Kind, err)
	}
	return id
}

// waitFinal waits for a job to reach a final state, reading the hash
// directly (broker.Job refuses a corrupt one), and answers its state and
// last_error.
func (r *hostileRig) waitFinal(t *testing.T, id string) (state, lastError string) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		v, err := r.rdb.HMGet(context.Background(), r.jobKey(id), "state", "last_error").Result()
		if err != nil {
			t.Fatalf("read job %s: %v", id, err)
		}
		s, _ := v[0].(string)
		le, _ := v[1].(string)
		if broker.State(s).Final() {
			return s, le
		}
	}
	t.Fatalf("job %s did not finish within 15s; pool log:\n%s", id, r.logs.String())
	return "", ""
}

func (r *hostileRig) wantDone(t *testing.T, id string) {
	t.Helper()
	if s, le := r.waitFinal(t, id); s != string(broker.StateDone) {
		t.Fatalf("neighbour job %s ended %s (%s), want done; pool log:\n%s", id, s, le, r.logs.String())
	}
}

// wantNothingWritten checks that a refused enqueue left no key behind.
func (r *hostileRig) wantNothingWritten(t *testing.T) {
	t.Helper()
	keys, err := r.rdb.Keys(context.Background(), r.prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Fatalf("a refused enqueue wrote %v", keys)
	}
}

func wantValidation(t *testing.T, err error, field string) {
	t.Helper()
	var ve *broker.ValidationError
	if !errors.As(err, &ve) || !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("error %T %v; want a *broker.ValidationError", err, err)
	}
	if ve.Field != field {
		t.Fatalf("validation error on %q, want %q: %v", ve.Field, field, err)
	}
	if len(err.Error()) > 1024 {
		t.Fatalf("validation error is %d bytes long; the offending value should be shortened", len(err.Error()))
	}
}

// TestHostileInput: hostile input ends in a clear error, or in a dead job
// with the reason; never in a crash, a stuck pool or a lost neighbour.
func TestHostileInput(t *testing.T) {
	t.Parallel()
	invalidUTF8 := "bad\xff\xfeutf8"
	cases := []struct {
		name string
		// private runs the case on its own redis-server: it changes the
		// whole server (SCRIPT FLUSH), which would disturb other tests.
		private bool
		pool    bool
		run     func(t *testing.T, r *hostileRig)
	}{
		{name: "MalformedJSONPayload", pool: true, run: func(t *testing.T, r *hostileRig) {
			bad := r.enqueue(t, broker.Job{Kind: "hostile.json", Payload: []byte(`{"n": 1,`)})
			wrongType := r.enqueue(t, broker.Job{Kind: "hostile.json", Payload: []byte(`{"n": "seven"}`)})
			good := r.enqueue(t, broker.Job{Kind: "hostile.json", Payload: []byte(`{"n": 7}`)})
			for id, reason := range map[string]string{bad: "unexpected end of JSON input", wrongType: "cannot unmarshal string"} {
				s, le := r.waitFinal(t, id)
				if s != string(broker.StateDead) || !strings.Contains(le, "decode hostile.json payload") || !strings.Contains(le, reason) {
					t.Fatalf("job %s ended %s with last_error %q; want dead, decode error with %q", id, s, le, reason)
				}
				if a, _ := r.rdb.HGet(context.Background(), r.jobKey(id), "attempt").Int(); a != 1 {
					t.Fatalf("a permanent decode failure ran %d attempts, want 1", a)
				}
			}
			r.wantDone(t, good)
			if j, err := r.b.Inspector().Job(context.Background(), hostileQueue, good); err != nil || string(j.Result) != `{"n":7}` {
				t.Fatalf("neighbour result %q (%v)", j.Result, err)
			}
		}},
		{name: "OversizedPayload", run: func(t *testing.T, r *hostileRig) {
			_, err := r.b.Client().Enqueue(context.Background(), broker.Job{Queue: hostileQueue, Kind: "hostile.ok",
				Payload: make([]byte, broker.MaxPayloadBytesDefault+1)})
			wantValidation(t, err, "payload")
			res := r.b.Client().EnqueueMany(context.Background(), []broker.Job{{Queue: hostileQueue, Kind: "hostile.ok",
				Payload: make([]byte, broker.MaxPayloadBytesDefault+1)}})
			wantValidation(t, res[0].Err, "payload")
			r.wantNothingWritten(t)
		}},
		{name: "UnknownKind", pool: true, run: func(t *testing.T, r *hostileRig) {
			id := r.enqueue(t, broker.Job{Kind: "no.such.kind-42"})
			neighbour := r.enqueue(t, broker.Job{Kind: "hostile.ok"})
			// Given back to wait for a pool that has the kind, until the
			// pool's short UnknownKind.For is over.
			s, le := r.waitFinal(t, id)
			if s != string(broker.StateDead) || !strings.Contains(le, `no pool registered kind "no.such.kind-42"`) {
				t.Fatalf("unknown kind ended %s with last_error %q; want dead after its wait, naming the kind", s, le)
			}
			if a, _ := r.rdb.HGet(context.Background(), r.jobKey(id), "attempt").Int(); a != 1 {
				t.Fatalf("a job given back while it waited ran %d attempts, want 1", a)
			}
			r.wantDone(t, neighbour)
		}},
		{name: "LongIDAndKind", run: func(t *testing.T, r *hostileRig) {
			_, err := r.b.Client().Enqueue(context.Background(), broker.Job{Queue: hostileQueue, Kind: "hostile.ok", ID: strings.Repeat("i", 2048)})
			wantValidation(t, err, "id")
			_, err = r.b.Client().Enqueue(context.Background(), broker.Job{Queue: hostileQueue, Kind: strings.Repeat("k", 10<<10)})
			wantValidation(t, err, "kind")
			_, err = r.b.Inspector().Job(context.Background(), hostileQueue, strings.Repeat("i", 2048))
			wantValidation(t, err, "id")
			r.wantNothingWritten(t)
		}},
		{name: "NonUTF8", run: func(t *testing.T, r *hostileRig) {
			ctx := context.Background()
			_, err := r.b.Client().Enqueue(ctx, broker.Job{Queue: invalidUTF8, Kind: "hostile.ok"})
			wantValidation(t, err, "queue")
			_, err = r.b.Client().Enqueue(ctx, broker.Job{Queue: hostileQueue, Kind: invalidUTF8})
			wantValidation(t, err, "kind")
			_, err = r.b.Client().Enqueue(ctx, broker.Job{Queue: hostileQueue, Kind: "hostile.ok", ID: invalidUTF8})
			wantValidation(t, err, "id")
			// A long non-UTF-8 value is shortened for the message without
			// panicking, wherever the cut falls.
			_, err = r.b.Client().Enqueue(ctx, broker.Job{Queue: hostileQueue, Kind: strings.Repeat("é", 40) + "\xff"})
			wantValidation(t, err, "kind")
			_, err = r.b.Leases().Claim(ctx, invalidUTF8, 1, time.Second)
			wantValidation(t, err, "queue")
			r.wantNothingWritten(t)
		}},
		{name: "JobHashEditedIntoGarbage", pool: true, run: func(t *testing.T, r *hostileRig) {
			ctx := context.Background()
			// Scheduled far ahead so that the pool cannot claim them before
			// the edits; then made due by hand.
			due := time.Hour
			badAttempt := r.enqueue(t, broker.Job{Kind: "hostile.ok", Delay: due})
			noKind := r.enqueue(t, broker.Job{Kind: "hostile.ok", Delay: due})
			notHash := r.enqueue(t, broker.Job{Kind: "hostile.ok", Delay: due})
			sameBatch := r.enqueue(t, broker.Job{Kind: "hostile.ok", Delay: due})
			if err := r.rdb.HSet(ctx, r.jobKey(badAttempt), "attempt", "x").Err(); err != nil {
				t.Fatal(err)
			}
			if err := r.rdb.HDel(ctx, r.jobKey(noKind), "kind").Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Del(ctx, r.jobKey(notHash))
				p.Set(ctx, r.jobKey(notHash), "garbage", 0)
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			scheduled := r.prefix + ":{" + hostileQueue + "}:scheduled"
			for _, id := range []string{badAttempt, noKind, notHash, sameBatch} {
				if err := r.rdb.ZAddXX(ctx, scheduled, redis.Z{Score: 0, Member: id}).Err(); err != nil {
					t.Fatal(err)
				}
			}
			now := r.enqueue(t, broker.Job{Kind: "hostile.json", Payload: []byte(`{"n":1}`)})
			r.wantDone(t, now)
			for id, reason := range map[string]string{badAttempt: `field attempt is "x", not an integer`, noKind: "field kind is missing"} {
				s, le := r.waitFinal(t, id)
				if s != string(broker.StateDead) || !strings.Contains(le, "corrupt job hash") || !strings.Contains(le, reason) {
					t.Fatalf("garbage job %s ended %s with last_error %q; want dead, corrupt job hash: %s", id, s, le, reason)
				}
			}
			r.wantDone(t, sameBatch)
			// The key that is no longer a hash cannot hold a state: the
			// claim lists it in dead for an operator and the pool logs it.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				_, err := r.rdb.ZScore(ctx, r.prefix+":{"+hostileQueue+"}:dead", notHash).Result()
				if err == nil && strings.Contains(r.logs.String(), notHash) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("job %s (key replaced by a string) not listed in dead and logged (%v); pool log:\n%s", notHash, err, r.logs.String())
				}
			}
			if !strings.Contains(r.logs.String(), "not a hash") {
				t.Fatalf("the pool did not log the non-hash job key; pool log:\n%s", r.logs.String())
			}
			var cje *broker.CorruptJobError
			if _, err := r.b.Inspector().Job(ctx, hostileQueue, notHash); !errors.As(err, &cje) {
				t.Fatalf("Job on a string key: %v; want a *broker.CorruptJobError", err)
			}
			// The pool still works after all that.
			r.wantDone(t, r.enqueue(t, broker.Job{Kind: "hostile.ok"}))
		}},
		{name: "ScriptFlushWhilePoolRuns", private: true, pool: true, run: func(t *testing.T, r *hostileRig) {
			ctx := context.Background()
			var ids []string
			for round := range 5 {
				for i := range 5 {
					ids = append(ids, r.enqueue(t, broker.Job{Kind: "hostile.json", Payload: fmt.Appendf(nil, `{"n":%d}`, round*10+i)}))
				}
				for _, e := range r.b.Client().EnqueueMany(ctx, []broker.Job{{Queue: hostileQueue, Kind: "hostile.ok"}, {Queue: hostileQueue, Kind: "hostile.ok"}}) {
					if e.Err != nil {
						t.Fatalf("EnqueueMany after SCRIPT FLUSH: %v", e.Err)
					}
					ids = append(ids, e.ID)
				}
				time.Sleep(30 * time.Millisecond)
				if err := r.rdb.ScriptFlush(ctx).Err(); err != nil {
					t.Fatal(err)
				}
			}
			for _, id := range ids {
				r.wantDone(t, id)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var rdb redis.UniversalClient
			if tc.private {
				rdb = startServer(t)
			} else {
				rdb = client(t)
			}
			r := newHostileRig(t, rdb)
			if tc.pool {
				r.startPool(t)
			}
			tc.run(t, r)
		})
	}
}
