// Package webhook is the adapter that handles jobs by POSTing them to a web
// service, so a queue can be served in any language: workerd's http
// handlers are built with it.
//
//	h, err := webhook.New(webhook.Config{URL: "https://example.com/jobs"})
//	…
//	mux.Handle("send_email", h)
//
// The response decides the job's fate: 2xx done, Retry-After snoozes, 408,
// 429 and 5xx retry, any other status is permanent.
package webhook
