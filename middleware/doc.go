// Package middleware holds handler wrappers in the net/http shape,
// func(Handler) Handler: panic recovery, slog logging and per-kind timeouts.
// Chain composes them in the order given, the first outermost:
//
//	h := middleware.Chain(middleware.Recover(), middleware.Logging(logger),
//		middleware.Timeout(time.Minute, nil))(mux)
//
// or give them to a pool as worker.Config.Middleware. Metrics are in
// package metrics, tracing in the broker and worker packages.
//
// A wrapper sees one job at a time and never talks to Redis: settling what
// the handler returned is the worker's business.
package middleware

import "github.com/fenceq/fenceq/handlers"

// Middleware wraps a Handler.
type Middleware func(handlers.Handler) handlers.Handler

// Chain composes mws so that the first is outermost: Chain(a, b)(h) runs a,
// then b, then h.
func Chain(mws ...Middleware) Middleware {
	return func(h handlers.Handler) handlers.Handler {
		for i := len(mws) - 1; i >= 0; i-- {
			h = mws[i](h)
		}
		return h
	}
}
