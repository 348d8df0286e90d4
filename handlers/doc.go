// Package handlers is what a fenceq user writes against: the Job a handler
// receives, the Handler and HandlerFunc pair (the net/http shape), the Mux
// that routes a job to its handler by kind, typed JSON handlers, and the
// errors a handler returns to steer what happens next (Permanent, Snooze)
// or finds as its context's cause (ErrLeaseLost, ErrJobCancelled, ...).
//
// The adapters that run a job without Go code live in packages of their
// own, handlers/exec (a command) and handlers/webhook (an HTTP POST), so
// this package imports neither os/exec nor syscall.
//
// It never talks to Redis itself: the worker package fills in a Job,
// including its fenced Progress call, and settles what the handler returns.
package handlers
