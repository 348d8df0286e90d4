package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/webhook"
	"github.com/fenceq/fenceq/jobrow"
)

// newJob builds a job of kind with payload and no progress reporter; the
// other fields are fixed so a test only states what it cares about.
func newJob(kind string, payload []byte) *handlers.Job {
	return handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-1", Queue: "default", Kind: kind, Payload: payload, Attempt: 1, MaxAttempts: 5, Generation: 7}})
}

// mustHTTP builds a webhook handler or fails the test.
func mustHTTP(t *testing.T, cfg webhook.Config) handlers.Handler {
	t.Helper()
	h, err := webhook.New(cfg)
	if err != nil {
		t.Fatalf("New(%q): %v", cfg.URL, err)
	}
	return h
}

// respond starts a server that answers every request with status, header
// and body.
func respond(t *testing.T, status int, header http.Header, body string) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for k, vs := range header {
			w.Header()[k] = vs
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPSendsPayloadAndHeaders(t *testing.T) {
	t.Parallel()
	type received struct {
		method string
		header http.Header
		body   []byte
	}
	got := make(chan received, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- received{r.Method, r.Header.Clone(), body}
		io.WriteString(w, `{"sent":true}`)
	}))
	defer srv.Close()

	h := mustHTTP(t, webhook.Config{
		URL:    srv.URL + "/hooks/email",
		Header: http.Header{"Authorization": {"Bearer s3cret"}},
	})
	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-42", Queue: "mail", Kind: "send", Payload: []byte(`{"to":"a@example.com"}`), Attempt: 2, MaxAttempts: 5, Generation: 9001}})
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	r := <-got
	if r.method != http.MethodPost {
		t.Errorf("method = %s, want POST", r.method)
	}
	if string(r.body) != `{"to":"a@example.com"}` {
		t.Errorf("body = %q, want the payload", r.body)
	}
	for k, want := range map[string]string{
		"Content-Type":         "application/json",
		"Authorization":        "Bearer s3cret",
		"Fenceq-Job-Id":        "job-42",
		"Fenceq-Job-Queue":     "mail",
		"Fenceq-Job-Kind":      "send",
		"Fenceq-Attempt":       "2",
		"Fenceq-Fencing-Token": "9001",
	} {
		if v := r.header.Get(k); v != want {
			t.Errorf("header %s = %q, want %q", k, v, want)
		}
	}
	if string(job.Result()) != `{"sent":true}` {
		t.Errorf("result = %q, want the response body", job.Result())
	}
}

func TestHTTPContentTypeFromConfig(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Content-Type")
	}))
	defer srv.Close()
	// A lower-case key, as a map literal may have it, still counts.
	h := mustHTTP(t, webhook.Config{URL: srv.URL, Header: http.Header{"content-type": {"text/plain"}}})
	if err := h.ProcessJob(context.Background(), newJob("k", []byte("hi"))); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if ct := <-got; ct != "text/plain" {
		t.Errorf("Content-Type = %q, want the configured text/plain", ct)
	}
}

func TestHTTPLargeBodyIsTruncated(t *testing.T) {
	t.Parallel()
	srv := respond(t, http.StatusOK, nil, strings.Repeat("x", 1<<20+100))
	h := mustHTTP(t, webhook.Config{URL: srv.URL})
	job := newJob("k", nil)
	if err := h.ProcessJob(context.Background(), job); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if got := job.Result(); len(got) != 1<<20 || !bytes.HasSuffix(got, []byte("[truncated]")) {
		t.Errorf("result is %d bytes; want 1 MiB ending in [truncated]", len(got))
	}
}

func TestHTTPStatuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		status    int
		header    http.Header
		body      string
		permanent bool
		want      []string
	}{
		{"500 retried", http.StatusInternalServerError, nil, "database down", false, []string{"500", "database down"}},
		{"502 retried", http.StatusBadGateway, nil, "", false, []string{"502"}},
		{"408 retried", http.StatusRequestTimeout, nil, "", false, []string{"408"}},
		{"429 without Retry-After retried", http.StatusTooManyRequests, nil, "slow down", false, []string{"429", "slow down"}},
		{"503 with bad Retry-After retried", http.StatusServiceUnavailable, http.Header{"Retry-After": {"soon"}}, "", false, []string{"503"}},
		{"400 permanent", http.StatusBadRequest, nil, `{"error":"missing field to"}`, true, []string{"400", "missing field to"}},
		{"404 permanent", http.StatusNotFound, nil, "", true, []string{"404"}},
		{"long body cut", http.StatusInternalServerError, nil, strings.Repeat("y", 600) + "TAIL", false, []string{"yyy..."}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := respond(t, tt.status, tt.header, tt.body)
			h := mustHTTP(t, webhook.Config{URL: srv.URL})
			job := newJob("k", nil)
			err := h.ProcessJob(context.Background(), job)
			if err == nil {
				t.Fatal("err = nil, want a failure")
			}
			var perm *handlers.PermanentError
			if errors.As(err, &perm) != tt.permanent {
				t.Errorf("err = %v: permanent = %v, want %v", err, !tt.permanent, tt.permanent)
			}
			var snooze *handlers.SnoozeError
			if errors.As(err, &snooze) {
				t.Errorf("err = %v is a snooze, want a failure", err)
			}
			for _, want := range append(tt.want, "post "+srv.URL) {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not contain %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "TAIL") {
				t.Errorf("error %q quotes more than the first 512 bytes of the body", err)
			}
			if job.Result() != nil {
				t.Errorf("result = %q, want none for a failure", job.Result())
			}
		})
	}
}

func TestHTTPRetryAfterSnoozes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		value    string
		min, max time.Duration
	}{
		{"429 seconds", http.StatusTooManyRequests, "7", 7 * time.Second, 7 * time.Second},
		{"503 seconds", http.StatusServiceUnavailable, "120", 2 * time.Minute, 2 * time.Minute},
		{"408 seconds", http.StatusRequestTimeout, "5", 5 * time.Second, 5 * time.Second},
		{"500 seconds", http.StatusInternalServerError, "9", 9 * time.Second, 9 * time.Second},
		{"502 seconds", http.StatusBadGateway, "3", 3 * time.Second, 3 * time.Second},
		{"504 HTTP date", http.StatusGatewayTimeout,
			time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat), 27 * time.Second, 30 * time.Second},
		{"capped at an hour", http.StatusTooManyRequests, "999999999999", time.Hour, time.Hour},
		{"zero floored", http.StatusTooManyRequests, "0", time.Second, time.Second},
		{"HTTP date", http.StatusServiceUnavailable,
			time.Now().Add(30 * time.Second).UTC().Format(http.TimeFormat), 27 * time.Second, 30 * time.Second},
		{"date in the past floored", http.StatusServiceUnavailable,
			time.Now().Add(-time.Hour).UTC().Format(http.TimeFormat), time.Second, time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := respond(t, tt.status, http.Header{"Retry-After": {tt.value}}, "busy")
			h := mustHTTP(t, webhook.Config{URL: srv.URL})
			err := h.ProcessJob(context.Background(), newJob("k", nil))
			var snooze *handlers.SnoozeError
			if !errors.As(err, &snooze) {
				t.Fatalf("err = %v, want a *SnoozeError", err)
			}
			if snooze.Delay < tt.min || snooze.Delay > tt.max {
				t.Errorf("Delay = %v, want within [%v, %v]", snooze.Delay, tt.min, tt.max)
			}
		})
	}
}

// A status that will not change is permanent, whatever Retry-After says.
func TestHTTPRetryAfterOnAPermanentStatus(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusNotFound, http.StatusBadRequest, http.StatusConflict} {
		srv := respond(t, status, http.Header{"Retry-After": {"5"}}, "no")
		h := mustHTTP(t, webhook.Config{URL: srv.URL})
		err := h.ProcessJob(context.Background(), newJob("k", nil))
		var perm *handlers.PermanentError
		if !errors.As(err, &perm) {
			t.Errorf("%d with Retry-After: err = %v, want a permanent failure", status, err)
		}
	}
}

func TestHTTPRedirectNotFollowedIsPermanent(t *testing.T) {
	t.Parallel()
	srv := respond(t, http.StatusFound, http.Header{"Location": {"/elsewhere"}}, "")
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	h := mustHTTP(t, webhook.Config{URL: srv.URL, Client: client})
	err := h.ProcessJob(context.Background(), newJob("k", nil))
	var perm *handlers.PermanentError
	if !errors.As(err, &perm) || !strings.Contains(err.Error(), "302") {
		t.Errorf("err = %v, want a permanent failure naming 302", err)
	}
}

// slowServer answers only when the request is abandoned, or after 10s.
func slowServer(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-time.After(10 * time.Second):
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPCancelAbortsRequest(t *testing.T) {
	t.Parallel()
	srv := slowServer(t)
	h := mustHTTP(t, webhook.Config{URL: srv.URL})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	time.AfterFunc(50*time.Millisecond, func() { cancel(handlers.ErrLeaseLost) })

	start := time.Now()
	err := h.ProcessJob(ctx, newJob("k", nil))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("ProcessJob took %v after cancellation; want it aborted at once", took)
	}
	if !errors.Is(err, handlers.ErrLeaseLost) {
		t.Errorf("err = %v, want it to wrap ErrLeaseLost", err)
	}
}

func TestHTTPTimeoutIsRetried(t *testing.T) {
	t.Parallel()
	srv := slowServer(t)
	h := mustHTTP(t, webhook.Config{URL: srv.URL, Timeout: 50 * time.Millisecond})
	start := time.Now()
	err := h.ProcessJob(context.Background(), newJob("k", nil))
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("ProcessJob took %v; want the 50ms timeout to end it", took)
	}
	var perm *handlers.PermanentError
	if err == nil || errors.As(err, &perm) || !strings.Contains(err.Error(), "no response within 50ms") {
		t.Errorf("err = %v, want a retried timeout", err)
	}
}

func TestHTTPTransportErrorIsRetried(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	h := mustHTTP(t, webhook.Config{URL: url})
	err := h.ProcessJob(context.Background(), newJob("k", nil))
	var perm *handlers.PermanentError
	if err == nil || errors.As(err, &perm) || !strings.Contains(err.Error(), "post "+url) {
		t.Errorf("err = %v, want a retried error naming the URL", err)
	}
}

func TestHTTPConfigErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		cfg   webhook.Config
		field string // of the *handlers.ValidationError
		want  string
	}{
		{"empty", webhook.Config{}, "URL", "URL is required"},
		{"does not parse", webhook.Config{URL: "http://[::1"}, "URL", `"http://[::1"`},
		{"no scheme", webhook.Config{URL: "example.com/hook"}, "URL", `"example.com/hook"`},
		{"host and port only", webhook.Config{URL: "localhost:8080"}, "URL", `"localhost:8080"`},
		{"ftp", webhook.Config{URL: "ftp://example.com/x"}, "URL", "scheme must be http or https"},
		{"no host", webhook.Config{URL: "http:///hook"}, "URL", "no host"},
		{"negative timeout", webhook.Config{URL: "https://example.com", Timeout: -time.Second}, "Timeout", "negative"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, err := webhook.New(tt.cfg)
			if err == nil {
				t.Fatalf("New = %v, nil; want an error", h)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not contain %q", err, tt.want)
			}
			var ve *handlers.ValidationError
			if !errors.As(err, &ve) || ve.Field != tt.field || !errors.Is(err, handlers.ErrInvalid) {
				t.Errorf("error %#v; want a *handlers.ValidationError of field %s, wrapping ErrInvalid", err, tt.field)
			}
		})
	}
}

func TestHTTPErrorsHidePassword(t *testing.T) {
	t.Parallel()
	srv := respond(t, http.StatusBadRequest, nil, "")
	url := strings.Replace(srv.URL, "://", "://user:hunter2@", 1)
	h := mustHTTP(t, webhook.Config{URL: url})
	err := h.ProcessJob(context.Background(), newJob("k", nil))
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("err = %v; want a failure that does not show the password", err)
	}
}

func TestHTTPHostHeader(t *testing.T) {
	t.Parallel()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Host
	}))
	defer srv.Close()
	// The client ignores a Host header field; the handler must move it to
	// the request for virtual hosting to work.
	h := mustHTTP(t, webhook.Config{URL: srv.URL, Header: http.Header{"Host": {"api.example"}}})
	if err := h.ProcessJob(context.Background(), newJob("k", nil)); err != nil {
		t.Fatalf("ProcessJob: %v", err)
	}
	if host := <-got; host != "api.example" {
		t.Errorf("Host = %q, want api.example", host)
	}
}

// Fenceq-Group is the job's group; a job without one sends none, even
// when the configured headers set it.
func TestHTTPGroupHeader(t *testing.T) {
	t.Parallel()
	got := make(chan []string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Values("Fenceq-Group")
	}))
	defer srv.Close()
	h := mustHTTP(t, webhook.Config{URL: srv.URL, Header: http.Header{"Fenceq-Group": {"from-config"}}})
	for group, want := range map[string][]string{"acme": {"acme"}, "": nil} {
		job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "job-1", Queue: "mail", Kind: "send", Attempt: 1, MaxAttempts: 5, Generation: 1, Group: group}})
		if err := h.ProcessJob(context.Background(), job); err != nil {
			t.Fatalf("ProcessJob: %v", err)
		}
		if v := <-got; !slices.Equal(v, want) {
			t.Errorf("group %q: Fenceq-Group headers %q, want %q", group, v, want)
		}
	}
}
