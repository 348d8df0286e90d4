package webhook

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
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
// Fenceq-Attempt and Fenceq-Fencing-Token (the job's generation), and
// Fenceq-Group when the job has a group (absent when it has none, even if
// cfg.Header sets it), and, when
// ctx holds a span (the pool's span of the attempt, when tracing), its W3C
// trace context in traceparent and tracestate (in place of any cfg.Header
// sets), so the endpoint's own spans join the job's trace. It is
// aborted when the job's context is cancelled, and the error then wraps
// context.Cause.
//
// A 2xx response settles the job, its body (at most 1 MiB, ending in
// "[truncated]" when cut) becoming the result. 408, 429 or 5xx with a
// Retry-After header snoozes the job for that long, without charging an
// attempt (at least a second, at most an hour). Without one, 408, 429,
// 5xx and transport errors are retried; any other
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
		shown := hideUserinfo(cfg.URL)
		return nil, invalid("URL", shown, fmt.Sprintf("URL %q does not parse", shown), err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		shown := hideUserinfo(cfg.URL)
		return nil, invalid("URL", shown, fmt.Sprintf("URL %q: scheme must be http or https, as in https://host/path", shown), nil)
	}
	if u.Host == "" {
		shown := hideUserinfo(cfg.URL)
		return nil, invalid("URL", shown, fmt.Sprintf("URL %q has no host", shown), nil)
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

// hideUserinfo is raw, a URL New refuses, with its userinfo (the
// "user:password@" before the host) replaced by "[redacted]@", for New's
// errors: they reach workerd's standard error and the logs that keep it.
// It goes by the text, as a URL New refuses may not parse, or parse with
// its userinfo in the path ("http//user:password@host"): the userinfo is
// what comes before the last "@" ahead of the first "/", "?" or "#" after
// the "//".
func hideUserinfo(raw string) string {
	start := 0
	if i := strings.Index(raw, "//"); i >= 0 {
		start = i + 2
	}
	rest := raw[start:]
	if end := strings.IndexAny(rest, "/?#"); end >= 0 {
		rest = rest[:end]
	}
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	return raw[:start] + "[redacted]" + raw[start+at:]
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
// appear in a message: the whole path and query, each path segment and
// query value alone, and the password, each raw, decoded, %XX-escaped
// (with hex digits in either case) and as a JSON string writes it. A
// server's error page that repeats the request ("Cannot POST /services/…",
// "no webhook with token …") must not show them either.
func urlSecrets(u *url.URL) []string {
	var s []string
	name := endpoint(u)
	add := func(v string) {
		// A part too short to be a secret would only blot out ordinary
		// words of the message, and the endpoint's name is shown anyway.
		if len(v) < 4 || strings.Contains(name, v) {
			return
		}
		for _, e := range []string{v, url.PathEscape(v), url.QueryEscape(v)} {
			for _, c := range []string{e, lowerHex(e)} {
				s = append(s, c, strings.ReplaceAll(c, "/", `\/`), jsonString(c))
			}
		}
	}
	add(u.String())
	add(u.RequestURI())
	if u.Path != "/" {
		add(u.EscapedPath())
		add(u.Path)
	}
	for _, seg := range strings.Split(u.EscapedPath(), "/") {
		add(seg)
		if v, err := url.PathUnescape(seg); err == nil {
			add(v)
		}
	}
	add(u.RawQuery)
	for _, vs := range u.Query() {
		for _, v := range vs {
			add(v)
		}
	}
	if p, ok := u.User.Password(); ok {
		add(p)
	}
	add(u.Fragment)
	// Longest first, so a whole URL is replaced before its parts.
	slices.SortFunc(s, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(s)
}

// lowerHex is s with the hex digits of its %XX escapes in lower case.
func lowerHex(s string) string {
	b := []byte(s)
	for i := 0; i+2 < len(b); i++ {
		if b[i] == '%' {
			b[i+1] = lower(b[i+1])
			b[i+2] = lower(b[i+2])
		}
	}
	return string(b)
}

func lower(c byte) byte {
	if 'A' <= c && c <= 'F' {
		return c + 'a' - 'A'
	}
	return c
}

// jsonString is s as encoding/json writes it inside a string's quotes.
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// scrub is s with every part of the URL that endpoint leaves out replaced
// by "[redacted]".
func (h *handler) scrub(s string) string {
	for _, secret := range h.secrets {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return s
}

// hide is err as an error to wrap in one of ours: err itself when its
// message shows nothing of the URL that endpoint leaves out, else an
// error whose message is scrubbed and whose chain does not hold err (a
// caller that unwraps it, or logs every error of the chain, must not find
// the secret there), but that errors.Is still matches against err's chain:
// context.DeadlineExceeded, say.
func (h *handler) hide(err error) error {
	msg := err.Error()
	if scrubbed := h.scrub(msg); scrubbed != msg {
		return &hiddenError{msg: scrubbed, err: err}
	}
	return err
}

// hiddenError is what hide makes of an error that shows the URL's
// secrets. It has no Unwrap, on purpose.
type hiddenError struct {
	msg string
	err error
}

func (e *hiddenError) Error() string        { return e.msg }
func (e *hiddenError) Is(target error) bool { return errors.Is(e.err, target) }
func (e *hiddenError) Timeout() bool {
	var t interface{ Timeout() bool }
	return errors.As(e.err, &t) && t.Timeout()
}

// ProcessJob POSTs the job's payload and turns the response into the
// job's outcome. No error it answers, nor any error in its chain, shows
// the URL's path, query or password: each is made without them.
func (h *handler) ProcessJob(ctx context.Context, job *handlers.Job) error {
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
		return nil, fmt.Errorf("post %s: build request: %w", h.name, h.hide(err))
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
	if job.Group != "" {
		req.Header.Set("Fenceq-Group", job.Group)
	} else {
		req.Header.Del("Fenceq-Group") // a configured one would name a group the job is not in
	}
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
		return fmt.Errorf("post %s: %s, but reading the body failed: %w", h.name, statusLine(resp), h.hide(err))
	}
	job.SetResult(body.Bytes())
	return nil
}

// failure is the outcome of a response that is not 2xx: a snooze when the
// server says when to come back, a retry when it may answer otherwise
// later, permanent when the same request will get the same answer.
func (h *handler) failure(resp *http.Response) error {
	retryable := resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode >= 500
	if retryable {
		if d, ok := parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()); ok {
			return handlers.Snooze(min(max(d, minSnooze), maxSnooze))
		}
	}
	// The snippet is for the message only; a failure to read it changes
	// nothing, the status has decided.
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, errorBodyQuote+1))
	err := fmt.Errorf("post %s: %s%s", h.name, statusLine(resp), h.bodyDetail(snippet))
	if retryable {
		return err
	}
	// Other 4xx, and 3xx the client did not follow: the same request will
	// get the same answer, whatever Retry-After says.
	return handlers.Permanent(err)
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
		return fmt.Errorf("post %s: no response within %v: %w", h.name, h.timeout, h.hide(err))
	}
	return fmt.Errorf("post %s: %w", h.name, h.hide(err))
}

// statusLine is "status 404 Not Found".
func statusLine(resp *http.Response) string {
	if resp.Status != "" {
		return "status " + resp.Status
	}
	return fmt.Sprintf("status %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
}

// bodyDetail formats the start of a response body for an error message,
// scrubbed: ": " and the text, "..." when it goes on, or "" for an empty
// body. Of a body that goes on, what could be the start of a secret cut
// off at the end of b is dropped too.
func (h *handler) bodyDetail(b []byte) string {
	cut := len(b) > errorBodyQuote
	if cut {
		b = b[:errorBodyQuote]
	}
	s := h.scrub(string(b))
	if cut {
		for _, secret := range h.secrets {
			for n := len(secret) - 1; n > 0; n-- {
				if strings.HasSuffix(s, secret[:n]) {
					s = s[:len(s)-n]
					break
				}
			}
		}
	}
	if len(s) > errorBodyQuote { // "[redacted]" is longer than some secrets
		s, cut = s[:errorBodyQuote], true
	}
	s = strings.TrimSpace(strings.ToValidUTF8(s, "\uFFFD"))
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
