// Package handlers is what a fenceq user writes against: the Job a handler
// receives, the Mux that routes a job to its handler by kind, and the
// errors a handler returns to steer what happens next.
//
// # Typed handlers
//
// A job's arguments are a Go type that names its kind once, the same type
// the producer enqueues (broker.Args):
//
//	type WelcomeArgs struct {
//		To string `json:"to"`
//	}
//
//	func (WelcomeArgs) Kind() string { return "welcome" }
//
//	// producer (b is a *broker.Broker)
//	id, err := b.Client().EnqueueArgs(ctx, WelcomeArgs{To: "ada@example.com"}, nil)
//
//	// worker
//	mux := handlers.NewMux()
//	handlers.Register(mux, func(ctx context.Context, job *handlers.Job, args WelcomeArgs) error {
//		return send(ctx, args.To)
//	})
//
// [Register] decodes the payload into the type; one that does not decode
// fails the job permanently. A worker.Pool runs the mux
// (worker.New(b, mux, cfg)); package middleware wraps it.
//
// # Untyped handlers
//
// For exec and http handlers, and for jobs that producers in other
// languages enqueue by kind and payload: the Handler and HandlerFunc pair
// (the net/http shape) registered with [Mux.Handle] under a kind, and
// [JSON] to decode a payload into a type that has no Kind method.
//
// # Steering a job
//
// A handler returns an error to steer what happens next (Permanent,
// Snooze) and finds why its context ended as the context's cause
// (ErrLeaseLost, ErrJobCancelled, ...).
//
// The adapters that run a job without Go code live in packages of their
// own, handlers/exec (a command) and handlers/webhook (an HTTP POST), so
// this package imports neither os/exec nor syscall.
//
// It never talks to Redis itself: the worker package fills in a Job,
// including its fenced Progress call, and settles what the handler returns.
package handlers
