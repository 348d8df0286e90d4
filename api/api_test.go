package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/jobtest"
)

const testToken = "0123456789abcdef0123456789abcdef"

type bundle struct {
	srv *httptest.Server
	b   *broker.Broker
	mr  *miniredis.Miniredis
}

func TestMain(m *testing.M) {
	redis.SetLogger(quiet{}) // the 503 tests dial a closed port
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func setup(t *testing.T, cfg Config) *bundle {
	t.Helper()
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), MaxRetries: -1, DialTimeout: time.Second})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Broker = b
	if cfg.Token == "" {
		cfg.Token = testToken
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return &bundle{srv: srv, b: b, mr: mr}
}

// do sends a request with the token and answers the status and the body.
func (x *bundle) do(t *testing.T, method, path, body string) (int, []byte) {
	t.Helper()
	return send(t, x.srv.URL, method, path, body, "Bearer "+testToken)
}

func send(t *testing.T, base, method, path, body, auth string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, base+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/json") {
		t.Errorf("%s %s: Content-Type %q, want application/json", method, path, ct)
	}
	return resp.StatusCode, out
}

func decode[T any](t *testing.T, body []byte) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T: %v\n%s", v, err, body)
	}
	return v
}

// refusal checks that a request is refused with status, code and field,
// and that the message says something.
func (x *bundle) refusal(t *testing.T, method, path, body string, status int, code, field string) apiError {
	t.Helper()
	got, out := x.do(t, method, path, body)
	return checkRefusal(t, got, out, status, code, field)
}

func checkRefusal(t *testing.T, got int, out []byte, status int, code, field string) apiError {
	t.Helper()
	if got != status {
		t.Fatalf("status %d, want %d: %s", got, status, out)
	}
	e := decode[errorResponse](t, out).Error
	if e.Code != code || e.Field != field || len(e.Message) < 20 {
		t.Fatalf("error %+v, want code %q field %q and a message", e, code, field)
	}
	return e
}

func TestNewRefusesWithoutToken(t *testing.T) {
	mr := miniredis.RunT(t)
	b, _ := broker.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), broker.Options{})
	for _, tok := range []string{"", "short", "0123456789abcdef 0123"} {
		if _, err := New(Config{Broker: b, Token: tok}); err == nil || !strings.Contains(err.Error(), "openssl rand") {
			t.Errorf("testToken %q: New answered %v, want a refusal saying how to make one", tok, err)
		}
	}
}

func TestEnqueueAndResend(t *testing.T) {
	x := setup(t, Config{})
	status, out := x.do(t, "POST", "/v1/queues/mail/jobs", `{"id": "j1", "kind": "send", "payload": {"to": "ada"}}`)
	if status != http.StatusCreated {
		t.Fatalf("first send: %d %s", status, out)
	}
	if e := decode[enqueued](t, out); e != (enqueued{ID: "j1", Queue: "mail", Created: true}) {
		t.Fatalf("first send answered %+v", e)
	}
	// The same request again (its answer lost): the same job, nothing more.
	status, out = x.do(t, "POST", "/v1/queues/mail/jobs", `{"id": "j1", "kind": "send", "payload": {"to": "ada"}}`)
	if status != http.StatusOK {
		t.Fatalf("re-send: %d %s", status, out)
	}
	if e := decode[enqueued](t, out); e != (enqueued{ID: "j1", Queue: "mail", State: "pending"}) {
		t.Fatalf("re-send answered %+v", e)
	}
	c, err := x.b.Inspector().Counts(context.Background(), "mail")
	if err != nil || c.Pending != 1 {
		t.Fatalf("counts %+v %v, want one pending job", c, err)
	}
	// Without an id: a new one, named in Location.
	req, _ := http.NewRequest("POST", x.srv.URL+"/v1/queues/mail/jobs", strings.NewReader(`{"kind":"send"}`))
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	e := decode[enqueued](t, body)
	if resp.StatusCode != 201 || e.ID == "" || resp.Header.Get("Location") != "/v1/queues/mail/jobs/"+e.ID {
		t.Fatalf("no id: %d %+v Location %q", resp.StatusCode, e, resp.Header.Get("Location"))
	}
}

// Every field of the job's JSON form goes through the API and is stored.
func TestEnqueueEveryField(t *testing.T) {
	x := setup(t, Config{})
	ctx := context.Background()
	full := jobtest.Full(t)
	full.Queue, full.Delay = "q", 0 // the path's queue; RunAt stands for the time
	for _, d := range full.DependsOn {
		if _, err := x.b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "dep", ID: d}); err != nil {
			t.Fatal(err)
		}
	}
	body, err := json.Marshal(full)
	if err != nil {
		t.Fatal(err)
	}
	status, out := x.do(t, "POST", "/v1/queues/q/jobs", string(body))
	if status != 201 {
		t.Fatalf("%d %s", status, out)
	}
	status, out = x.do(t, "GET", "/v1/queues/q/jobs/"+full.ID, "")
	if status != 200 {
		t.Fatalf("GET: %d %s", status, out)
	}
	j := decode[jobJSON](t, out)
	if j.Kind != full.Kind || string(j.Payload) != string(full.Payload) || j.MaxAttempts != full.MaxAttempts ||
		j.Priority != full.Priority || j.Group != full.Group || !maps.Equal(j.Metadata, full.Metadata) || j.State != "blocked" {
		t.Fatalf("stored %+v\nsent %+v", j, full)
	}
	if j.RunAt == nil || !j.RunAt.Equal(full.RunAt) {
		t.Fatalf("run_at %v, want %v", j.RunAt, full.RunAt)
	}
	// The unique key is held: another job with it is refused, naming the holder.
	e := x.refusal(t, "POST", "/v1/queues/q/jobs", fmt.Sprintf(`{"kind":"k","unique_key":%q}`, full.UniqueKey), 409, CodeUniqueHeld, "unique_key")
	if e.HolderID != full.ID || !strings.Contains(e.Message, full.ID) {
		t.Fatalf("409 %+v does not name the holder %q", e, full.ID)
	}
	// The spellings for people: delay and at.
	status, out = x.do(t, "POST", "/v1/queues/q/jobs", `{"id":"later","kind":"k","delay":"1h"}`)
	if status != 201 {
		t.Fatalf("delay: %d %s", status, out)
	}
	if _, out = x.do(t, "GET", "/v1/queues/q/jobs/later", ""); decode[jobJSON](t, out).State != "scheduled" {
		t.Fatalf("delayed job: %s", out)
	}
}

func TestBatch(t *testing.T) {
	x := setup(t, Config{MaxBatch: 10})
	_, _ = x.b.Client().Enqueue(context.Background(), broker.Job{Queue: "q", Kind: "k", ID: "old", UniqueKey: "u"})
	body := `{"jobs": [
		{"id": "a", "kind": "k"},
		{"id": "a", "kind": "k"},
		{"kind": "k", "priority": 1000},
		{"kind": "k", "colour": "red"},
		{"id": "b", "kind": "k", "depends_on": ["a"]},
		{"id": "c", "kind": "k", "unique_key": "u"},
		{"kind": "k", "queue": "other"},
		{"id": "old", "kind": "k"}
	]}`
	status, out := x.do(t, "POST", "/v1/queues/q/jobs/batch", body)
	if status != 200 {
		t.Fatalf("%d %s", status, out)
	}
	r := decode[batchResponse](t, out)
	want := []struct {
		status      int
		id          string
		code, field string
	}{
		{201, "a", "", ""},
		{200, "a", "", ""}, // the same id twice in one batch: the first one's job
		{400, "", CodeInvalid, "priority"},
		{400, "", CodeInvalid, "colour"},
		{201, "b", "", ""}, // depends on a job earlier in the batch
		{409, "c", CodeUniqueHeld, "unique_key"},
		{400, "", CodeInvalid, "queue"},
		{200, "old", "", ""},
	}
	if len(r.Jobs) != len(want) || r.Created != 2 || r.Error != nil {
		t.Fatalf("answered %d items, %d created, error %v: %s", len(r.Jobs), r.Created, r.Error, out)
	}
	for i, w := range want {
		it := r.Jobs[i]
		if it.Status != w.status || w.id != "" && it.ID != w.id || (it.Error == nil) != (w.code == "") ||
			it.Error != nil && (it.Error.Code != w.code || it.Error.Field != w.field) {
			t.Errorf("item %d: %+v (error %+v), want %+v", i, it, it.Error, w)
		}
	}
	if e := r.Jobs[5].Error; e.HolderID != "old" {
		t.Errorf("unique held item names holder %q, want old", e.HolderID)
	}
	if r.Jobs[0].Created != true || r.Jobs[1].Created || r.Jobs[1].State != "pending" {
		t.Errorf("items 0 and 1: %+v %+v", r.Jobs[0], r.Jobs[1])
	}
}

// Each refusal, one by one: its status, code and field.
func TestRefusals(t *testing.T) {
	x := setup(t, Config{MaxBatch: 3, MaxBodyBytes: 4096, MaxWait: 5 * time.Second})
	_, _ = x.b.Client().Enqueue(context.Background(), broker.Job{Queue: "q", Kind: "k", ID: "pending", UniqueKey: "held"})

	t.Run("400 bad JSON", func(t *testing.T) { x.refusal(t, "POST", "/v1/queues/q/jobs", `{"kind":`, 400, CodeInvalid, "job") })
	t.Run("400 empty body", func(t *testing.T) { x.refusal(t, "POST", "/v1/queues/q/jobs", ``, 400, CodeInvalid, "body") })
	t.Run("400 unknown field", func(t *testing.T) {
		e := x.refusal(t, "POST", "/v1/queues/q/jobs", `{"kind":"k","prio":3}`, 400, CodeInvalid, "prio")
		if !strings.Contains(e.Message, "priority") {
			t.Errorf("message %q does not list the fields", e.Message)
		}
	})
	t.Run("400 wrong type", func(t *testing.T) {
		x.refusal(t, "POST", "/v1/queues/q/jobs", `{"kind":"k","max_attempts":"3"}`, 400, CodeInvalid, "max_attempts")
	})
	t.Run("400 bad value", func(t *testing.T) {
		x.refusal(t, "POST", "/v1/queues/q/jobs", `{"kind":"k","max_attempts":-1}`, 400, CodeInvalid, "max_attempts")
		x.refusal(t, "POST", "/v1/queues/q/jobs", `{"kind":"k","depends_on":["nope"]}`, 400, CodeInvalid, "depends_on")
		x.refusal(t, "POST", "/v1/queues/q/jobs", `{}`, 400, CodeInvalid, "kind")
	})
	t.Run("400 queue", func(t *testing.T) {
		x.refusal(t, "POST", "/v1/queues/q/jobs", `{"kind":"k","queue":"p"}`, 400, CodeInvalid, "queue")
		x.refusal(t, "POST", "/v1/queues/a%7Bb/jobs", `{"kind":"k"}`, 400, CodeInvalid, "queue")
		x.refusal(t, "GET", "/v1/queues/a%7Bb/jobs/x", ``, 400, CodeInvalid, "queue")
	})
	t.Run("400 batch", func(t *testing.T) {
		x.refusal(t, "POST", "/v1/queues/q/jobs/batch", `[{"kind":"k"}]`, 400, CodeInvalid, "body")
		x.refusal(t, "POST", "/v1/queues/q/jobs/batch", `{"jobs":[]}`, 400, CodeInvalid, "jobs")
		x.refusal(t, "POST", "/v1/queues/q/jobs/batch", `{"job":[{"kind":"k"}]}`, 400, CodeInvalid, "body")
		x.refusal(t, "POST", "/v1/queues/q/jobs/batch", `{"jobs":[{"kind":"k"}]} {}`, 400, CodeInvalid, "body")
		// A key given twice was read as its last value: the first list
		// was dropped without a word.
		x.refusal(t, "POST", "/v1/queues/q/jobs/batch", `{"jobs":[{"kind":"k","id":"first"}],"jobs":[{"kind":"k"}]}`, 400, CodeInvalid, "jobs")
		x.refusal(t, "POST", "/v1/queues/q/jobs/batch", `{"jobs":[{"kind":"k","id":"first"}],"JOBS":[{"kind":"k"}]}`, 400, CodeInvalid, "jobs")
		x.refusal(t, "POST", "/v1/queues/q/jobs", `{"kind":"report","kind":"wipe"}`, 400, CodeInvalid, "kind")
	})
	t.Run("400 wait timeout", func(t *testing.T) {
		for _, v := range []string{"soon", "-1s", "6s", "NaN", "1e300"} {
			x.refusal(t, "GET", "/v1/queues/q/jobs/pending/wait?timeout="+v, ``, 400, CodeInvalid, "timeout")
		}
	})
	t.Run("401", func(t *testing.T) {
		for _, auth := range []string{"", "Bearer", "Bearer wrong", "Basic " + testToken, "Bearer " + testToken + "x", testToken} {
			status, out := send(t, x.srv.URL, "GET", "/v1/queues/q/jobs/pending", "", auth)
			checkRefusal(t, status, out, 401, CodeUnauthorized, "Authorization")
		}
		// A refused testToken changes nothing, even on a route that would.
		status, out := send(t, x.srv.URL, "POST", "/v1/queues/q/jobs", `{"kind":"k","id":"sneaky"}`, "Bearer nope")
		checkRefusal(t, status, out, 401, CodeUnauthorized, "Authorization")
		if _, err := x.b.Inspector().Job(context.Background(), "q", "sneaky"); err == nil {
			t.Fatal("a request with a wrong testToken enqueued a job")
		}
	})
	t.Run("404 job", func(t *testing.T) {
		for _, p := range []string{"/v1/queues/q/jobs/nope", "/v1/queues/q/jobs/nope/wait?timeout=0", "/v1/queues/q/jobs/nope/wait?timeout=1s"} {
			x.refusal(t, "GET", p, ``, 404, CodeNotFound, "id")
		}
		// A queue no job was ever enqueued to is named as such.
		for _, p := range []string{"/v1/queues/unknownq/jobs/nope", "/v1/queues/unknownq/jobs/nope/wait?timeout=1s"} {
			if e := x.refusal(t, "GET", p, ``, 404, CodeNotFound, "queue"); !strings.Contains(e.Message, `no queue "unknownq"`) {
				t.Errorf("message %q", e.Message)
			}
		}
		x.refusal(t, "POST", "/v1/queues/unknownq/jobs/nope/cancel", ``, 404, CodeNotFound, "queue")
		x.refusal(t, "POST", "/v1/queues/q/jobs/nope/cancel", ``, 404, CodeNotFound, "id")
		x.refusal(t, "POST", "/v1/queues/q/jobs/nope/retry", ``, 404, CodeNotFound, "id")
	})
	t.Run("404 route and 405", func(t *testing.T) {
		x.refusal(t, "GET", "/v1/nothing", ``, 404, CodeNoRoute, "")
		x.refusal(t, "DELETE", "/v1/queues/q/jobs/pending", ``, 405, CodeMethodNotAllowed, "")
		x.refusal(t, "GET", "/v1/queues/q/jobs", ``, 405, CodeMethodNotAllowed, "")
	})
	t.Run("409 unique key", func(t *testing.T) {
		e := x.refusal(t, "POST", "/v1/queues/q/jobs", `{"kind":"k","unique_key":"held"}`, 409, CodeUniqueHeld, "unique_key")
		if e.HolderID != "pending" {
			t.Errorf("holder %q, want pending", e.HolderID)
		}
	})
	t.Run("409 retry of a pending job", func(t *testing.T) {
		x.refusal(t, "POST", "/v1/queues/q/jobs/pending/retry", ``, 409, CodeConflict, "id")
	})
	t.Run("413 body", func(t *testing.T) {
		big := fmt.Sprintf(`{"kind":"k","payload":%q}`, strings.Repeat("x", 5000))
		x.refusal(t, "POST", "/v1/queues/q/jobs", big, 413, CodeTooLarge, "body")
		x.refusal(t, "POST", "/v1/queues/q/jobs/batch", `{"jobs":[`+big+`]}`, 413, CodeTooLarge, "body")
	})
	t.Run("413 batch", func(t *testing.T) {
		e := x.refusal(t, "POST", "/v1/queues/q/jobs/batch", `{"jobs":[{"kind":"k"},{"kind":"k"},{"kind":"k"},{"kind":"k"}]}`, 413, CodeTooLarge, "jobs")
		if !strings.Contains(e.Message, "at most 3") {
			t.Errorf("message %q does not name the limit", e.Message)
		}
		if c, _ := x.b.Inspector().Counts(context.Background(), "q"); c.Pending != 1 {
			t.Errorf("a refused batch stored jobs: %+v", c)
		}
	})
	t.Run("503 Redis unreachable", func(t *testing.T) {
		y := setup(t, Config{})
		y.mr.Close()
		e := y.refusal(t, "POST", "/v1/queues/q/jobs", `{"id":"x","kind":"k"}`, 503, CodeUnavailable, "")
		if e.ID != "x" {
			t.Errorf("503 names id %q, want x", e.ID)
		}
		y.refusal(t, "GET", "/v1/queues/q/jobs/x", ``, 503, CodeUnavailable, "")
		y.refusal(t, "GET", "/v1/queues/q/jobs/x/wait?timeout=1s", ``, 503, CodeUnavailable, "")
		y.refusal(t, "POST", "/v1/queues/q/jobs/x/cancel", ``, 503, CodeUnavailable, "")
		y.refusal(t, "POST", "/v1/queues/q/jobs/x/retry", ``, 503, CodeUnavailable, "")
		status, out := y.do(t, "POST", "/v1/queues/q/jobs/batch", `{"jobs":[{"id":"y","kind":"k"},{"kind":"k","priority":500}]}`)
		r := decode[batchResponse](t, out)
		if status != 503 || r.Error == nil || r.Error.Code != CodeUnavailable || r.Jobs[0].Status != 503 || r.Jobs[0].ID != "y" || r.Jobs[1].Status != 400 {
			t.Fatalf("batch without Redis: %d %s", status, out)
		}
	})
}

// The OpenAPI document is served without the testToken, and is JSON.
func TestOpenAPIServed(t *testing.T) {
	x := setup(t, Config{})
	status, out := send(t, x.srv.URL, "GET", "/v1/openapi.json", "", "")
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if status != 200 || json.Unmarshal(out, &doc) != nil || !strings.HasPrefix(doc.OpenAPI, "3.") || len(doc.Paths) == 0 {
		t.Fatalf("%d %.200s", status, out)
	}
}

// A job's life through the API: wait blocks until it ends; cancel and retry.
func TestWaitCancelRetry(t *testing.T) {
	x := setup(t, Config{})
	ctx := context.Background()
	if status, out := x.do(t, "POST", "/v1/queues/q/jobs", `{"id":"w","kind":"k","payload":[1,2]}`); status != 201 {
		t.Fatalf("%d %s", status, out)
	}
	// A wait that times out answers the job as it stands.
	start := time.Now()
	status, out := x.do(t, "GET", "/v1/queues/q/jobs/w/wait?timeout=200ms", "")
	if j := decode[jobJSON](t, out); status != 200 || j.Final || j.State != "pending" || time.Since(start) < 200*time.Millisecond {
		t.Fatalf("timed-out wait: %d %s after %v", status, out, time.Since(start))
	}
	// A wait answers once a worker settles the job, with its result.
	done := make(chan []byte, 1)
	go func() {
		_, out := x.do(t, "GET", "/v1/queues/q/jobs/w/wait?timeout=10", "")
		done <- out
	}()
	time.Sleep(100 * time.Millisecond)
	cl, err := x.b.Leases().Claim(ctx, "q", 1, time.Minute)
	if err != nil || len(cl.Leases) != 1 {
		t.Fatalf("claim: %v %v", cl, err)
	}
	if _, err := x.b.Leases().Ack(ctx, cl.Leases[0], []byte(`{"sum":3}`)); err != nil {
		t.Fatal(err)
	}
	select {
	case out := <-done:
		j := decode[jobJSON](t, out)
		if !j.Final || j.State != "done" || string(j.Result) != `{"sum":3}` || string(j.Payload) != `[1,2]` || j.Attempt != 1 {
			t.Fatalf("wait answered %s", out)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait did not answer within 5s of the ack")
	}
	// A finished job is not retried; cancel a pending one, then retry it.
	x.refusal(t, "POST", "/v1/queues/q/jobs/w/retry", ``, 409, CodeConflict, "id")
	_, _ = x.b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: "c", Payload: []byte{0xff, 0}})
	status, out = x.do(t, "POST", "/v1/queues/q/jobs/c/cancel", "")
	if ch := decode[changed](t, out); status != 200 || ch.Job.State != "cancelled" || !ch.Job.Final || ch.Job.PayloadBase64 != "/wA=" {
		t.Fatalf("cancel: %d %s", status, out)
	}
	// Cancel sent again: the same answer.
	if status, out = x.do(t, "POST", "/v1/queues/q/jobs/c/cancel", ""); status != 200 || decode[changed](t, out).Job.State != "cancelled" {
		t.Fatalf("cancel again: %d %s", status, out)
	}
	status, out = x.do(t, "POST", "/v1/queues/q/jobs/c/retry", "")
	if ch := decode[changed](t, out); status != 200 || ch.Job.State != "pending" || ch.PreviousState != "cancelled" {
		t.Fatalf("retry: %d %s", status, out)
	}
}

// A client that goes away mid-wait leaves no goroutine or blocked
// connection behind, and the server answers the next request.
func TestWaitClientGone(t *testing.T) {
	x := setup(t, Config{})
	_, _ = x.b.Client().Enqueue(context.Background(), broker.Job{Queue: "q", Kind: "k", ID: "w"})
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", x.srv.URL+"/v1/queues/q/jobs/w/wait?timeout=30s", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("a 30 s wait answered within 150 ms")
	}
	if status, _ := x.do(t, "GET", "/v1/queues/q/jobs/w", ""); status != 200 {
		t.Fatalf("after a gone client: %d", status)
	}
}

// Paths with characters that need escaping reach the job.
func TestEscapedIDs(t *testing.T) {
	x := setup(t, Config{})
	for _, id := range []string{"a/b", "a b", "é?#%"} {
		body, _ := json.Marshal(map[string]string{"id": id, "kind": "k"})
		status, out := x.do(t, "POST", "/v1/queues/q/jobs", string(body))
		if status != 201 {
			t.Fatalf("%q: %d %s", id, status, out)
		}
		status, out = x.do(t, "GET", "/v1/queues/q/jobs/"+urlEscape(id), "")
		if status != 200 || decode[jobJSON](t, out).ID != id {
			t.Fatalf("GET %q: %d %s", id, status, out)
		}
	}
}

func urlEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		if c >= 'a' && c <= 'z' {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	return b.String()
}

// Waits must not take every connection of the broker's pool: with 20
// waiting on a pool of 4, an enqueue still answers at once, and every
// wait, blocking or polling, answers when the job ends. (Without
// MaxBlockingWaits, the enqueue waited 2.7 s for a connection.)
func TestWaitsDoNotStarveThePool(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), PoolSize: 4})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Broker: b, Token: testToken, MaxBlockingWaits: 2})
	if err != nil {
		t.Fatal(err)
	}
	x := &bundle{srv: httptest.NewServer(s), b: b, mr: mr}
	t.Cleanup(x.srv.Close)
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: "w"}); err != nil {
		t.Fatal(err)
	}
	answers := make(chan string, 20)
	for range 20 {
		go func() {
			_, out := x.do(t, "GET", "/v1/queues/q/jobs/w/wait?timeout=20s", "")
			var j jobJSON
			_ = json.Unmarshal(out, &j)
			answers <- j.State
		}()
	}
	time.Sleep(300 * time.Millisecond) // the waits are under way
	for i := range 5 {
		start := time.Now()
		if status, out := x.do(t, "POST", "/v1/queues/q/jobs", `{"kind":"k"}`); status != 201 {
			t.Fatalf("enqueue %d: %d %s", i, status, out)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("enqueue %d took %v beside 20 waits: they hold the pool's connections", i, d)
		}
	}
	if _, err := b.Inspector().Cancel(ctx, "q", "w"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		select {
		case st := <-answers:
			if st != "cancelled" {
				t.Fatalf("wait %d answered %q, want cancelled", i, st)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("only %d of 20 waits answered within 5 s of the cancel", i)
		}
	}
}

// Two clients sending the same job at once: one creates it, the other is
// told it exists; one job in all.
func TestSameIDAtOnce(t *testing.T) {
	x := setup(t, Config{})
	statuses := make(chan int, 20)
	for range 20 {
		go func() {
			status, _ := x.do(t, "POST", "/v1/queues/q/jobs", `{"id":"same","kind":"k"}`)
			statuses <- status
		}()
	}
	created := 0
	for range 20 {
		switch s := <-statuses; s {
		case 201:
			created++
		case 200:
		default:
			t.Fatalf("status %d", s)
		}
	}
	if c, _ := x.b.Inspector().Counts(context.Background(), "q"); created != 1 || c.Pending != 1 {
		t.Fatalf("%d created, %d pending; want one of each", created, c.Pending)
	}
}

// A full batch of one id: the first item creates it, the 999 others
// answer it; and a batch of 100,000 small jobs is refused whole.
func TestBatchBounds(t *testing.T) {
	x := setup(t, Config{})
	one := strings.TrimSuffix(strings.Repeat(`{"id":"dup","kind":"k"},`, MaxBatchDefault), ",")
	status, out := x.do(t, "POST", "/v1/queues/q/jobs/batch", `{"jobs":[`+one+`]}`)
	r := decode[batchResponse](t, out)
	if status != 200 || r.Created != 1 || len(r.Jobs) != MaxBatchDefault || r.Jobs[0].Status != 201 || r.Jobs[999].Status != 200 {
		t.Fatalf("%d: %d created of %d", status, r.Created, len(r.Jobs))
	}
	many := strings.TrimSuffix(strings.Repeat(`{"kind":"k"},`, 100_000), ",")
	e := x.refusal(t, "POST", "/v1/queues/q/jobs/batch", `{"jobs":[`+many+`]}`, 413, CodeTooLarge, "jobs")
	if !strings.Contains(e.Message, "100000 jobs") || !strings.Contains(e.Message, "at most 1000") {
		t.Errorf("message %q", e.Message)
	}
	if c, _ := x.b.Inspector().Counts(context.Background(), "q"); c.Pending != 1 {
		t.Fatalf("pending %d after the refused batch, want 1", c.Pending)
	}
}

// A wait longer than the server's read and write timeouts still answers:
// the wait lifts its own write deadline, and the read deadline ends no
// request whose body was read.
func TestWaitOutlastsServerTimeouts(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, _ := broker.New(rdb, broker.Options{})
	s, err := New(Config{Broker: b, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(s)
	srv.Config.ReadTimeout, srv.Config.WriteTimeout = 200*time.Millisecond, 200*time.Millisecond
	srv.Start()
	t.Cleanup(srv.Close)
	x := &bundle{srv: srv, b: b, mr: mr}
	_, _ = b.Client().Enqueue(context.Background(), broker.Job{Queue: "q", Kind: "k", ID: "w"})
	start := time.Now()
	status, out := x.do(t, "GET", "/v1/queues/q/jobs/w/wait?timeout=700ms", "")
	if j := decode[jobJSON](t, out); status != 200 || j.State != "pending" || time.Since(start) < 700*time.Millisecond {
		t.Fatalf("a 700 ms wait under 200 ms server timeouts: %d %s after %v", status, out, time.Since(start))
	}
}

// The Location of a job whose queue or id is "." or ".." leads to that
// job: such a segment is sent escaped, where a client or a proxy would
// otherwise resolve it away. (Location /v1/queues/../jobs/x led to
// GET /v1/jobs/x, no route.)
func TestLocationOfDotSegments(t *testing.T) {
	x := setup(t, Config{})
	for _, c := range []struct{ queue, id string }{{"..", "x"}, {".", "y"}, {"q", ".."}, {"q", "."}, {"..", ".."}} {
		body, _ := json.Marshal(map[string]string{"id": c.id, "kind": "k"})
		req, _ := http.NewRequest("POST", x.srv.URL+"/v1/queues/"+urlEscape(c.queue)+"/jobs", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			t.Fatalf("%+v: enqueue answered %d", c, resp.StatusCode)
		}
		loc, err := resp.Location()
		if err != nil {
			t.Fatal(err)
		}
		status, out := send(t, x.srv.URL, "GET", loc.RequestURI(), "", "Bearer "+testToken)
		if status != 200 {
			t.Fatalf("%+v: GET %s (the Location) answered %d %s", c, resp.Header.Get("Location"), status, out)
		}
		if j := decode[jobJSON](t, out); j.Queue != c.queue || j.ID != c.id {
			t.Fatalf("%+v: the Location %s leads to job %q of %q", c, resp.Header.Get("Location"), j.ID, j.Queue)
		}
	}
}

// The default bound on blocking waits leaves half the broker's pool to
// everything else, however small the pool: with a pool of 4 and 20 waits,
// an enqueue answers at once. (The default was 8 whatever the pool: the
// 4 connections were all held by waits.)
func TestDefaultWaitsFitThePool(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr(), PoolSize: 4})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Broker: b, Token: testToken})
	if err != nil {
		t.Fatal(err)
	}
	if cap(s.blocking) != 2 {
		t.Errorf("a pool of 4 allows %d blocking waits, want 2", cap(s.blocking))
	}
	x := &bundle{srv: httptest.NewServer(s), b: b, mr: mr}
	t.Cleanup(x.srv.Close)
	ctx := context.Background()
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "q", Kind: "k", ID: "w"}); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{}, 20)
	for range 20 {
		go func() {
			x.do(t, "GET", "/v1/queues/q/jobs/w/wait?timeout=20s", "")
			done <- struct{}{}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	if status, out := x.do(t, "POST", "/v1/queues/q/jobs", `{"kind":"k"}`); status != 201 || time.Since(start) > time.Second {
		t.Fatalf("enqueue beside 20 waits: %d in %v %s", status, time.Since(start), out)
	}
	if _, err := b.Inspector().Cancel(ctx, "q", "w"); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		<-done
	}
	// A large pool keeps the default.
	rdb2 := redis.NewClient(&redis.Options{Addr: mr.Addr(), PoolSize: 100})
	t.Cleanup(func() { _ = rdb2.Close() })
	b2, _ := broker.New(rdb2, broker.Options{})
	if s2, err := New(Config{Broker: b2, Token: testToken}); err != nil || cap(s2.blocking) != MaxBlockingWaitsDefault {
		t.Errorf("a pool of 100: %d blocking waits, %v", cap(s2.blocking), err)
	}
}
