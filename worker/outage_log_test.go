package worker_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// outageLog is a log writer safe for the pool's goroutines.
type outageLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *outageLog) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// messages counts the log's records by message, and keeps the last of each.
func (b *outageLog) messages(t *testing.T) (map[string]int, map[string]map[string]any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n, last := map[string]int{}, map[string]map[string]any{}
	for _, line := range bytes.Split(bytes.TrimSpace(b.buf.Bytes()), []byte("\n")) {
		var rec map[string]any
		if err := json.Unmarshal(line, &rec); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		msg, _ := rec["msg"].(string)
		n[msg]++
		last[msg] = rec
	}
	return n, last
}

// A Redis outage logs one warning per pool when it begins and one line
// when Redis answers again, however many jobs settle, claims, renewals
// and reaps fail meanwhile; nothing more at info or above.
func TestOutageLogsOncePerPool(t *testing.T) {
	o := newOutage(t)
	var logs outageLog
	const jobs = 20
	started, finish := make(chan struct{}, jobs), make(chan struct{})
	p, err := worker.New(o.b, handlers.HandlerFunc(func(context.Context, *handlers.Job) error {
		started <- struct{}{}
		<-finish
		return nil
	}), worker.Config{
		Concurrency: jobs, LeaseDuration: 10 * time.Second, PollInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
	})
	if err != nil {
		t.Fatal(err)
	}
	err = p.Start(context.Background())
	for try := 1; err != nil && isTimeout(err) && try < 5; try++ {
		err = p.Start(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, jobs)
	for i := range ids {
		if ids[i], err = o.b.Client().Enqueue(context.Background(), broker.Job{Queue: worker.QueueDefault, Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	for range jobs {
		<-started
	}
	o.mr.Close()
	close(finish) // every ack now fails and is retried
	// Longer than the broker's own re-sends (broker.ResendHorizon), so that
	// the pool's services meet the errors.
	time.Sleep(broker.ResendHorizon + 1500*time.Millisecond)
	if err := o.mr.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if j := o.waitDone(t, id); j.State != broker.StateDone {
			t.Fatalf("job %s ended %s", id, j.State)
		}
	}
	if err := p.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	n, last := logs.messages(t)
	down := "fenceq: Redis unavailable: claims, settlements and renewals are retried until it answers; nothing is lost, running handlers keep their leases until their deadlines"
	if n[down] != 1 || n["fenceq: Redis answers again"] != 1 {
		t.Fatalf("outage lines: %d down, %d back; want one each. The log's messages: %v", n[down], n["fenceq: Redis answers again"], n)
	}
	for msg, c := range n {
		switch msg {
		case down, "fenceq: Redis answers again", "fenceq pool started", "fenceq pool shutting down", "fenceq pool stopped":
		default:
			t.Errorf("%d × %q during the outage; want only the two outage lines", c, msg)
		}
	}
	back := last["fenceq: Redis answers again"]
	if ns, _ := back["unavailable_for"].(float64); time.Duration(ns) < time.Second {
		t.Errorf("unavailable_for %v; want seconds, from the first failure the pool met to the first answer", back["unavailable_for"])
	}
	if f, _ := back["failed_calls"].(float64); f < jobs {
		t.Errorf("failed_calls %v; want at least one per job (%d)", back["failed_calls"], jobs)
	}
}
