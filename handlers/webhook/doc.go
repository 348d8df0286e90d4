// Package webhook is the adapter that handles jobs by POSTing them to a web
// service, so a queue can be served in any language: workerd's http
// handlers are built with it.
//
//	h, err := webhook.New(webhook.Config{URL: "https://example.com/jobs"})
//	…
//	mux.Handle("send_email", h)
//
// The response decides the job's fate: 2xx done; 408, 429 or 5xx with a
// Retry-After snoozes the job that long (no attempt charged), and without
// one retries it; any other status is permanent.
package webhook
