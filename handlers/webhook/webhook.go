package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/internal/capture"
)

const (
	// errorBodyQuote is how much of a failed response's body an error
	// message quotes: enough for an error document, not a whole page.
	errorBodyQuote = 512
	// maxSnooze caps a Retry-After: a misconfigured server must not
	// park a job for days.
	maxSnooze = time.Hour
	// minSnooze floors a Retry-After: "0" or a date in the past would
	// otherwise rerun the job at once, without charging an attempt, in a
	// loop as fast as the server answers.
	minSnooze = time.Second
)

// Config configures New.
type Config struct {
	URL     string        // required: where the payload is POSTed
	Header  http.Header   // extra request headers
	Timeout time.Duration // per request; 0 means no limit beyond the job's context
	Client  *http.Client  // default: a client with no overall timeout
}

// New returns a Handler that POSTs each job's payload to cfg.URL, so jobs
// can be handled by any web service.
//
// The request carries cfg.Header, Content-Type application/json unless
// cfg.Header sets one, and Fenceq-Job-Id, Fenceq-Job-Queue, Fenceq-Job-Kind,
// Fenceq-Attempt and Fenceq-Fencing-Token (the job's generation), and, when
// ctx holds a span (the pool's span of the attempt, when tracing), its W3C
// trace context in traceparent and tracestate (in place of any cfg.Header
// sets), so the endpoint's own spans join the job's trace. It is
// aborted when the job's context is cancelled, and the error then wraps
// context.Cause.
//
// A 2xx response settles the job, its body (at most 1 MiB, ending in
// "[truncated]" when cut) becoming the result. 429 or 503 with a
// Retry-After header snoozes the job for that long (at least a second, at
// most an hour). 408, 429, 5xx and transport errors are retried; any other
// status fails the job permanently, since sending the same request again
// will get the same answer.
//
// Errors name the endpoint by its scheme and host alone, as in "post
// https://hooks.slack.com: status 500 ...", and show "[redacted]" where a
// transport error or a response body repeats the URL's path, query or
// password: a webhook URL often holds its secret there, and a job's errors
// are shown to every dashboard viewer and logged.
func New(cfg Config) (handlers.Handler, error) {
	if cfg.URL == "" {
		return nil, invalid("URL", "", "a URL is required", nil)
	}
	u, err := url.Parse(cfg.URL)
	if err != nil {
		// url.Error repeats the URL; say it once.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, invalid("URL", cfg.URL, fmt.Sprintf("URL %q does not parse", cfg.URL), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, invalid("URL", cfg.URL, fmt.Sprintf("URL %q: scheme must be http or https, as in https://host/path", cfg.URL), nil)
	}
	if u.Host == "" {
		return nil, invalid("URL", cfg.URL, fmt.Sprintf("URL %q has no host", cfg.URL), nil)
	}
	if cfg.Timeout < 0 {
		return nil, invalid("Timeout", cfg.Timeout.String(),
			fmt.Sprintf("timeout %v is negative: give a positive duration, or 0 for none", cfg.Timeout), nil)
	}
	client := cfg.Client
	if client == nil {
		// Not http.DefaultClient: another package could change that one.
		client = &http.Client{}
	}
	return &handler{
		url:     u.String(),
		name:    endpoint(u),
		secrets: urlSecrets(u),
		header:  cfg.Header.Clone(),
		timeout: cfg.Timeout,
		client:  client,
	}, nil
}

// invalid is the *handlers.ValidationError of a Config that New refuses.
func invalid(field, value, reason string, err error) error {
	return &handlers.ValidationError{Handler: "http handler", Field: field, Value: value, Reason: reason, Err: err}
}

type handler struct {
	url, name string
	secrets   []string // parts of url no message may show, longest first
	header    http.Header
	timeout   time.Duration
	client    *http.Client
}

// endpoint names u in messages by its scheme and host (and port) alone: a
// password in its userinfo, and a token in its path or query (a
// Slack-style webhook URL is its secret), must not reach a job's error
// history, which every dashboard viewer reads, nor the logs.
func endpoint(u *url.URL) string {
	return (&url.URL{Scheme: u.Scheme, Host: u.Host}).String()
}

// urlSecrets are the parts of u that endpoint leaves out, as they may
// appear in a message: escaped and not, whole and each query value. A
// server's error page that repeats the request ("Cannot POST /services/…")
// must not show them either.
func urlSecrets(u *url.URL) []string {
	var s []string
	name := endpoint(u)
	add := func(v string) {
		// A part too short to be a secret would only blot out ordinary
		// words of the message, and the endpoint's name is shown anyway.
		if len(v) >= 4 && !strings.Contains(name, v) {
			s = append(s, v)
		}
	}
	add(u.String())
	add(u.RequestURI())
	if u.Path != "/" {
		add(u.EscapedPath())
		add(u.Path)
	}
	add(u.RawQuery)
	for _, vs := range u.Query() {
		for _, v := range vs {
			add(v)
			add(url.QueryEscape(v))
		}
	}
	if p, ok := u.User.Password(); ok {
		add(p)
	}
	add(u.Fragment)
	// Longest first, so a whole URL is replaced before its parts.
	slices.SortFunc(s, func(a, b string) int { return len(b) - len(a) })
	return slices.Compact(s)
}

// redacted is an error whose message has the URL's secrets blotted out;
// errors.Is and errors.As still see what it wraps.
type redacted struct {
	msg string
	err error
}

func (e *redacted) Error() string { return e.msg }
func (e *redacted) Unwrap() error { return e.err }

// redact answers err with every part of the URL that endpoint leaves out
// replaced by "[redacted]": whatever a transport error or a response body
// repeats of the request.
func (h *handler) redact(err error) error {
	if err == nil {
		return nil
	}
	msg := err.Error()
	changed := false
	for _, s := range h.secrets {
		if strings.Contains(msg, s) {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
			changed = true
		}
	}
	if !changed {
		return err
	}
	return &redacted{msg: msg, err: err}
}

// ProcessJob POSTs the job's payload and turns the response into the
// job's outcome. No error it answers shows the URL's path, query or
// password.
func (h *handler) ProcessJob(ctx context.Context, job *handlers.Job) error {
	return h.redact(h.post(ctx, job))
}

// post is ProcessJob before its error is redacted.
func (h *handler) post(ctx context.Context, job *handlers.Job) error {
	reqCtx := ctx
	if h.timeout > 0 {
		var cancel context.CancelFunc
		reqCtx, cancel = context.WithTimeout(ctx, h.timeout)
		defer cancel()
	}
	req, err := h.request(reqCtx, job)
	if err != nil {
		return err
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return h.transportError(ctx, reqCtx, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return h.succeed(ctx, job, resp)
	}
	return h.failure(resp)
}

// request is the POST of job's payload, with the configured headers and
// the job's own.
func (h *handler) request(ctx context.Context, job *handlers.Job) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(job.Payload))
	if err != nil {
		return nil, fmt.Errorf("post %s: build request: %w", h.name, err)
	}
	for k, vs := range h.header {
		for _, v := range vs {
			req.Header.Add(k, v) // Add canonicalizes k, so Get below finds it
		}
	}
	if host := req.Header.Get("Host"); host != "" {
		req.Host = host // the client ignores a Host header field
	}
	if req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Fenceq-Job-Id", job.ID)
	req.Header.Set("Fenceq-Job-Queue", job.Queue)
	req.Header.Set("Fenceq-Job-Kind", job.Kind)
	req.Header.Set("Fenceq-Attempt", strconv.Itoa(job.Attempt))
	req.Header.Set("Fenceq-Fencing-Token", strconv.FormatInt(job.Generation, 10))
	if trace.SpanContextFromContext(ctx).IsValid() {
		// The attempt's trace context replaces any configured one whole:
		// Inject writes no tracestate when the span has none, and a
		// configured one left beside it would speak of another trace.
		req.Header.Del("Traceparent")
		req.Header.Del("Tracestate")
		propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	return req, nil
}

// succeed makes the body of a 2xx response the job's result.
func (h *handler) succeed(ctx context.Context, job *handlers.Job, resp *http.Response) error {
	body := capture.NewHead(capture.ResultLimit)
	// One byte past the limit tells a body that fits from one that does
	// not, without reading the rest.
	if _, err := io.Copy(body, io.LimitReader(resp.Body, capture.ResultLimit+1)); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("post %s: %s, aborted reading the body: %w", h.name, statusLine(resp), context.Cause(ctx))
		}
		return fmt.Errorf("post %s: %s, but reading the body failed: %w", h.name, statusLine(resp), err)
	}
	job.SetResult(body.Bytes())
	return nil
}

// failure is the outcome of a response that is not 2xx: a snooze when the
// server says when to come back, a retry when it may answer otherwise
// later, permanent when the same request will get the same answer.
func (h *handler) failure(resp *http.Response) error {
	if resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return handlers.Snooze(min(max(d, minSnooze), maxSnooze))
		}
	}
	// The snippet is for the message only; a failure to read it changes
	// nothing, the status has decided.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyQuote+1))
	err := fmt.Errorf("post %s: %s%s", h.name, statusLine(resp), bodyDetail(snippet))
	switch {
	case resp.StatusCode == http.StatusRequestTimeout,
		resp.StatusCode == http.StatusTooManyRequests,
		resp.StatusCode >= 500:
		return err
	default:
		// Other 4xx, and 3xx the client did not follow: the same request
		// will get the same answer.
		return handlers.Permanent(err)
	}
}

// transportError describes a request that got no response.
func (h *handler) transportError(ctx, reqCtx context.Context, err error) error {
	if ctx.Err() != nil {
		return fmt.Errorf("post %s: aborted: %w", h.name, context.Cause(ctx))
	}
	// url.Error repeats the method and URL, which the message already has.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if reqCtx.Err() != nil {
		return fmt.Errorf("post %s: no response within %v: %w", h.name, h.timeout, err)
	}
	return fmt.Errorf("post %s: %w", h.name, err)
}

// statusLine is "status 404 Not Found".
func statusLine(resp *http.Response) string {
	if resp.Status != "" {
		return "status " + resp.Status
	}
	return fmt.Sprintf("status %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
}

// bodyDetail formats the start of a response body for an error message:
// ": " and the text, "..." when it goes on, or "" for an empty body.
func bodyDetail(b []byte) string {
	cut := len(b) > errorBodyQuote
	if cut {
		b = b[:errorBodyQuote]
	}
	s := strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
	if s == "" {
		return ""
	}
	if cut {
		s += "..."
	}
	return ": " + s
}

// parseRetryAfter reads a Retry-After value, in seconds or as an HTTP date.
func parseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if secs, err := strconv.ParseUint(v, 10, 64); err == nil {
		// Capped before converting, so a huge value cannot overflow.
		if secs > uint64(maxSnooze/time.Second) {
			return maxSnooze, true
		}
		return time.Duration(secs) * time.Second, true
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return t.Sub(now), true
}
