package webhook_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/webhook"
	"github.com/fenceq/fenceq/worker"
	"github.com/fenceq/fenceq/worker/workertest"
)

// A Slack-style webhook URL: the secret is the path, and here a token in
// the query too.
const (
	pathSecret  = "XXXXPATHSECRET"
	querySecret = "QQQQQUERYSECRET"
	secretRest  = "/services/T000/B000/" + pathSecret + "?token=" + querySecret
)

// echoPath answers status with a body that repeats the request's path and
// query, as many frameworks' error pages do ("Cannot POST /services/…").
func echoPath(t *testing.T, status int) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, "Cannot POST "+r.URL.RequestURI())
	}))
	t.Cleanup(srv.Close)
	return srv
}

// assertNoSecret fails if s shows the URL's path or query.
func assertNoSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, secret := range []string{pathSecret, querySecret} {
		if strings.Contains(s, secret) {
			t.Errorf("%s shows the URL's secret %s: %s", what, secret, s)
		}
	}
}

// An error names the endpoint by scheme and host only: its path and query
// (a Slack-style webhook's secret) land in the job's error history, which
// every read-only dashboard viewer reads.
func TestHTTPErrorsHideURLPathAndQuery(t *testing.T) {
	t.Parallel()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close() // nothing listens there now
	redirectLoop := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, r.URL.RequestURI(), http.StatusFound)
	}))
	t.Cleanup(redirectLoop.Close)
	tests := []struct {
		name    string
		base    string
		timeout time.Duration
	}{
		{"500 repeating the path", echoPath(t, http.StatusInternalServerError).URL, 0},
		{"404 repeating the path", echoPath(t, http.StatusNotFound).URL, 0},
		{"connection refused", closed.URL, 0},
		{"timeout", slowServer(t).URL, 50 * time.Millisecond},
		{"redirect loop", redirectLoop.URL, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := mustHTTP(t, webhook.Config{URL: tt.base + secretRest, Timeout: tt.timeout})
			err := h.ProcessJob(context.Background(), newJob("k", nil))
			if err == nil {
				t.Fatal("ProcessJob = nil, want a failure")
			}
			assertNoSecret(t, "error", err.Error())
			if !strings.Contains(err.Error(), "post "+tt.base) {
				t.Errorf("error %q does not name the endpoint %s", err, tt.base)
			}
		})
	}
}

// The same through a pool: neither the job's error history nor the pool's
// log shows the secret.
func TestHTTPJobErrorHistoryHidesURLSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := workertest.New(t)
	srv := echoPath(t, http.StatusInternalServerError)
	h := mustHTTP(t, webhook.Config{URL: srv.URL + secretRest})
	id, err := env.Broker.Client().Enqueue(ctx, broker.Job{Queue: "hooks", Kind: "notify", MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	p, err := worker.New(env.Broker, h, worker.Config{
		Queues: []worker.Queue{{Name: "hooks"}}, PollInterval: 5 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	var info broker.JobInfo
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if info, err = env.Broker.Inspector().Job(ctx, "hooks", id); err != nil {
			t.Fatal(err)
		}
		if info.State == broker.StateDead {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job is %s after 10s, want dead after its one attempt", info.State)
		}
	}
	if err := p.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if len(info.Errors) != 1 || !strings.Contains(info.Errors[0].Error, "status 500") {
		t.Fatalf("error history %+v, want the one 500", info.Errors)
	}
	assertNoSecret(t, "error history", info.Errors[0].Error)
	assertNoSecret(t, "last error", info.LastError)
	if !strings.Contains(logs.String(), "status 500") {
		t.Errorf("the pool's log does not mention the failure: %s", logs.String())
	}
	assertNoSecret(t, "pool log", logs.String())
}

// A server may repeat only part of the URL: the token alone ("no webhook
// with token …"), or the path with its slashes escaped as JSON encoders
// such as PHP's write it. The secret is in the part, not in the whole.
func TestHTTPErrorsHideURLSecretsRepeatedInPart(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		body func(r *http.Request) string
	}{
		{"the token alone", func(r *http.Request) string {
			return `{"error":"no webhook with token ` + path.Base(r.URL.Path) + `"}`
		}},
		{"the query value alone", func(r *http.Request) string {
			return `{"error":"token ` + r.URL.Query().Get("token") + ` revoked"}`
		}},
		{"the path as JSON with escaped slashes", func(r *http.Request) string {
			return `{"path":"` + strings.ReplaceAll(r.URL.Path, "/", `\/`) + `"}`
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, tt.body(r))
			}))
			t.Cleanup(srv.Close)
			h := mustHTTP(t, webhook.Config{URL: srv.URL + secretRest})
			err := h.ProcessJob(context.Background(), newJob("k", nil))
			if err == nil {
				t.Fatal("ProcessJob = nil, want a failure")
			}
			assertNoSecret(t, "error", err.Error())
		})
	}
}

// What errors.As finds in the error, and every error its chain holds, hides
// the secrets as the error itself does: a caller that takes the
// *handlers.PermanentError out to log it, or an error reporter that shows
// each wrapped error (as Sentry's does), shows what they say.
func TestHTTPErrorChainHidesURLSecrets(t *testing.T) {
	t.Parallel()
	h := mustHTTP(t, webhook.Config{URL: echoPath(t, http.StatusNotFound).URL + secretRest})
	err := h.ProcessJob(context.Background(), newJob("k", nil))
	var perm *handlers.PermanentError
	if !errors.As(err, &perm) {
		t.Fatalf("ProcessJob = %v, want a permanent failure", err)
	}
	assertNoSecret(t, "the *handlers.PermanentError errors.As finds", perm.Error())
	for e := err; e != nil; e = errors.Unwrap(e) {
		assertNoSecret(t, fmt.Sprintf("the %T in the error's chain", e), e.Error())
	}
}

// New's own errors, about a URL it refuses, do not show its password: they
// reach workerd's standard error and the logs that keep it.
func TestHTTPConfigErrorHidesURLPassword(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"ftp://user:PASSWORDSECRET@hooks.example.com/x", // a scheme it does not take
		"http//user:PASSWORDSECRET@hooks.example.com/x", // a typo
		"http://user:PASSWORDSECRET@/x",                 // no host
	} {
		_, err := webhook.New(webhook.Config{URL: u})
		if err == nil {
			t.Fatalf("New(%q) = nil error", u)
		}
		if strings.Contains(err.Error(), "PASSWORDSECRET") {
			t.Errorf("New's error shows the URL's password: %v", err)
		}
	}
}
