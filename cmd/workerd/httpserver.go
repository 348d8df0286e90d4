package main

import (
	"net/http"
	"time"
)

// The bounds of every HTTP server workerd runs (newHTTPServer). No page
// takes long: each request's Redis work is bounded to a few seconds
// (the dashboard's 5 s, /readyz's and /metrics' 2 s), and the live
// updates are polls, not streams, so a response that takes longer than
// httpWriteTimeout is a client that does not read.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 30 * time.Second // headers and body: a form is at most 64 KiB
	httpWriteTimeout      = 30 * time.Second
	httpIdleTimeout       = 2 * time.Minute
	httpMaxHeaderBytes    = 64 << 10
)

// newHTTPServer is the server of workerd ui, of workerd run's endpoints
// and of workerd dev's dashboard, built here only, so that none of them
// can drift: a client that sends slowly, reads slowly or sends huge
// headers holds a connection and its memory for a bounded time only, and
// headers over httpMaxHeaderBytes are refused (431).
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
	}
}
