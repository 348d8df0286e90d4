package dashboard_test

import (
	"context"
	"fmt"
	"html"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// registerPool writes a pool's registry entry that lists leases as its
// running jobs.
func (r *rig) registerPool(id, host, name string, leases ...broker.Lease) *broker.WorkerRegistration {
	r.t.Helper()
	reg, err := r.b.Leases().RegisterWorker(broker.WorkerInfo{ID: id, Host: host, PID: 4242, Name: name, Version: "v9.9.9",
		Queues: []string{"mail"}, Concurrency: 8}, time.Minute)
	if err != nil {
		r.t.Fatal(err)
	}
	var running []broker.RunningJob
	for _, l := range leases {
		running = append(running, broker.RunningJob{Queue: l.Queue, ID: l.ID, Generation: l.Generation, Since: l.Deadline.Add(-time.Minute)})
	}
	if err := reg.Refresh(context.Background(), running); err != nil {
		r.t.Fatal(err)
	}
	return reg
}

func (r *rig) claimOne(queue, id string) broker.Lease {
	r.t.Helper()
	ctx := context.Background()
	if _, err := r.b.Client().Enqueue(ctx, broker.Job{Queue: queue, ID: id, Kind: "send"}); err != nil {
		r.t.Fatal(err)
	}
	res, err := r.b.Leases().Claim(ctx, queue, 1, time.Minute)
	if err != nil || len(res.Leases) != 1 {
		r.t.Fatalf("claim: %v, %v", res.Leases, err)
	}
	return res.Leases[0]
}

// The workers page lists the live pools; the job page and the leases page
// name the pool that holds a lease and link to its row.
func TestWorkersAndHolders(t *testing.T) {
	r := setup(t, "")
	c := r.client()
	code, body := r.get(c, "/ui/workers")
	if code != http.StatusOK || !strings.Contains(body, "No pool is live") {
		t.Fatalf("empty registry: %d\n%s", code, body)
	}
	if !strings.Contains(body, `href="/ui/workers"`) {
		t.Error("the navigation has no link to the workers page")
	}

	l := r.claimOne("mail", "j1")
	r.registerPool("abc123", "box-1", "pool 1", l)
	code, body = r.get(c, "/ui/workers")
	if code != http.StatusOK {
		t.Fatalf("workers page: %d\n%s", code, body)
	}
	for _, want := range []string{`id="w-abc123"`, "box-1", "pool 1", "4242", "v9.9.9", "1 of 8", "mail", `href="/ui/queues/mail/jobs/j1"`} {
		if !strings.Contains(body, want) {
			t.Errorf("the workers page lacks %q", want)
		}
	}

	if strings.Contains(body, "shutting down") {
		t.Error("a running pool is shown shutting down")
	}
	reg := r.registerPool("def456", "box-2", "pool 2")
	reg.SetStopping()
	if err := reg.Refresh(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	if _, body := r.get(c, "/ui/workers"); !strings.Contains(body, "shutting down") {
		t.Error("a stopping pool is not shown shutting down")
	}

	_, body = r.get(c, "/ui/queues/mail/jobs/j1")
	if !strings.Contains(body, `href="/ui/workers#w-abc123"`) || !strings.Contains(html.UnescapeString(body), "box-1 pid 4242 (pool 1)") {
		t.Errorf("the job page does not link to its holder:\n%s", body)
	}
	if !strings.Contains(body, `id="running-for"`) {
		t.Error("the job page does not say how long the job has run")
	}
	_, body = r.get(c, "/ui/queues/mail/leases")
	if !strings.Contains(body, `href="/ui/workers#w-abc123"`) || !strings.Contains(body, "Running for") {
		t.Errorf("the leases page does not name the holder:\n%s", body)
	}

	// Another lease of the same job (reaped and claimed again) is not
	// this pool's: the generation tells them apart.
	if _, err := r.b.Inspector().ReleaseUnowned(context.Background(), "mail", "j1"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.b.Leases().Claim(context.Background(), "mail", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	_, body = r.get(c, "/ui/queues/mail/jobs/j1")
	if strings.Contains(body, "w-abc123") || !strings.Contains(body, "no live pool lists it") {
		t.Errorf("a newer claim is shown as held by the pool of the older:\n%s", body)
	}
	_, body = r.get(c, "/ui/queues/mail/leases")
	if strings.Contains(body, "w-abc123") || !strings.Contains(body, "no live pool") {
		t.Errorf("the leases page names the pool of an older claim:\n%s", body)
	}
}

// Hostile values in an entry are escaped, and a pool that lists more jobs
// than it shows says so.
func TestWorkersPageEscapes(t *testing.T) {
	r := setup(t, "")
	reg, err := r.b.Leases().RegisterWorker(broker.WorkerInfo{ID: "x1", Host: `<script>alert(1)</script>`, Name: `"><b>`,
		Queues: []string{"<i>q</i>"}, Concurrency: 1}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var running []broker.RunningJob
	for i := range broker.MaxWorkerJobs + 5 {
		running = append(running, broker.RunningJob{Queue: "q", ID: "<j>" + strings.Repeat("x", i)})
	}
	if err := reg.Refresh(context.Background(), running); err != nil {
		t.Fatal(err)
	}
	_, body := r.get(r.client(), "/ui/workers")
	if strings.Contains(body, "<script>alert") || strings.Contains(body, `"><b>`) || strings.Contains(body, "<i>q") {
		t.Errorf("the workers page does not escape an entry:\n%s", body)
	}
	if !strings.Contains(body, "And 5 more not listed") {
		t.Error("the workers page does not say how many running jobs it leaves out")
	}
}

// The workers page lists at most 500 running jobs of all pools together,
// the longest-running first, and says how many more there are.
func TestWorkersPageBounded(t *testing.T) {
	r := setup(t, "")
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for p := range 7 {
		reg, err := r.b.Leases().RegisterWorker(broker.WorkerInfo{ID: fmt.Sprint("p", p), Host: "h", Concurrency: 200}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var running []broker.RunningJob
		for i := range 150 {
			running = append(running, broker.RunningJob{Queue: "q", ID: fmt.Sprintf("p%d-j%03d", p, i), Since: base.Add(time.Duration(p*1000+i) * time.Second)})
		}
		if err := reg.Refresh(context.Background(), running); err != nil {
			t.Fatal(err)
		}
	}
	_, body := r.get(r.client(), "/ui/workers")
	if n := strings.Count(body, `<td class="id">`); n != 500 {
		t.Errorf("the page lists %d running jobs, want 500", n)
	}
	if !strings.Contains(body, "And 550 more not listed") { // 7 × 150 running, 7 × 100 listed, 500 shown
		t.Error("the page does not say how many running jobs it leaves out")
	}
	if !strings.Contains(body, "p0-j000") || strings.Contains(body, "p6-j000") {
		t.Error("the page does not list the longest-running first")
	}
}

// With more pools than a listing reads, the page says it lists only some
// of them. (It said "Live pools: 1000" of 1,005.)
func TestWorkersPageSaysWhenTruncated(t *testing.T) {
	r := setup(t, "")
	for p := range broker.MaxWorkersListed + 5 {
		reg, err := r.b.Leases().RegisterWorker(broker.WorkerInfo{ID: fmt.Sprint("p", p), Host: "h", Concurrency: 1}, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if err := reg.Refresh(context.Background(), nil); err != nil {
			t.Fatal(err)
		}
	}
	_, body := r.get(r.client(), "/ui/workers")
	if !strings.Contains(body, `id="pools-more"`) || !strings.Contains(body, fmt.Sprintf("the registry holds %d", broker.MaxWorkersListed+5)) {
		t.Error("the page does not say it lists only some of the pools")
	}
}
