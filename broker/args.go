package broker

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"time"
)

// QueueDefault is the queue a job goes to when neither its args type nor
// the caller names one; a worker pool with no queues configured reads it.
const QueueDefault = "default"

// Args is a job's arguments as a Go type. The type names its kind once, so
// a producer cannot misspell it, and the job's payload is the value's JSON
// (encoding/json), so it has the shape the handler decodes.
//
// Kind must return a constant of the type, never something read from the
// value: handlers.Register calls it on the zero value to learn which kind
// it handles. Declare it on the value receiver.
//
//	type WelcomeArgs struct {
//		To string `json:"to"`
//	}
//
//	func (WelcomeArgs) Kind() string { return "welcome" }
type Args interface {
	Kind() string
}

// ArgsWithOptions is an Args type with default options: the queue its jobs
// go to, how many attempts they get, a unique key computed from the value,
// a priority, and so on. The options a caller passes to [JobFor] or
// [Client.EnqueueArgs] are laid over these.
type ArgsWithOptions interface {
	Args
	EnqueueOptions() EnqueueOptions
}

// EnqueueOptions are the options of a typed enqueue: every field of [Job]
// but Kind and Payload, which come from the Args value. Each field means
// what the Job field of the same name means.
type EnqueueOptions struct {
	Queue                string        // as Job.Queue; "" means the type's default, then QueueDefault
	ID                   string        // as Job.ID
	Delay                time.Duration // as Job.Delay
	RunAt                time.Time     // as Job.RunAt
	MaxAttempts          int           // as Job.MaxAttempts
	Priority             int           // as Job.Priority
	UniqueKey            string        // as Job.UniqueKey
	UniqueFor            time.Duration // as Job.UniqueFor
	DependsOn            []string      // as Job.DependsOn
	RunIfDependencyFails bool          // as Job.RunIfDependencyFails
	Group                string        // as Job.Group
	// Metadata is as Job.Metadata. Laid over the type's default, it adds
	// entries key by key, a key of both taking this one's value.
	Metadata map[string]string
}

// JobFor is the Job a typed enqueue stores: Kind is args.Kind(), Payload is
// the JSON of args, and the options are the type's defaults (when it is an
// [ArgsWithOptions]) overlaid by opts, which may be nil.
//
// The overlay goes field by field: a field of opts that is not its zero
// value wins; DependsOn wins when it is not nil; a bool is true when either
// says so; Metadata entries of both are kept, opts' winning a key of both.
// The Job's Metadata is a map of its own, so a later change to it (a
// tracer adding its headers) reaches neither opts nor the type's default. Delay and RunAt are one choice, when the job runs: opts setting
// either replaces the type's default of both. A field left zero in opts
// keeps the type's default, so a default cannot be overridden with a zero
// (priority 0, say): build the Job with JobFor and set that field on it.
// With no queue from either, the job goes to QueueDefault.
//
// Enqueue the result with Enqueue, EnqueueMany or a Batcher, or write it to
// an outbox: JobFor is how typed args reach every path that takes a Job.
// It returns a *ValidationError (errors.Is ErrInvalid) for nil args, an
// empty kind, or a value encoding/json cannot marshal; the rest of the job
// is checked where it is enqueued.
func JobFor(args Args, opts *EnqueueOptions) (Job, error) {
	if args == nil {
		return Job{}, &ValidationError{Field: "args", Reason: "is nil: pass a value of your args type"}
	}
	typ := fmt.Sprintf("%T", args)
	if v := reflect.ValueOf(args); v.Kind() == reflect.Pointer && v.IsNil() {
		return Job{}, &ValidationError{Field: "args", Value: typ, Reason: "is a nil pointer: pass a value of the type, or a pointer to one"}
	}
	kind := args.Kind()
	if kind == "" {
		return Job{}, &ValidationError{Field: "kind", Value: typ, Reason: "the type's Kind method returns \"\": make it return the job kind's name, a constant"}
	}
	payload, err := json.Marshal(args)
	if err != nil {
		return Job{}, &ValidationError{Field: "args", Value: typ,
			Reason: fmt.Sprintf("do not encode as JSON (%v): give the type only fields encoding/json can marshal, or a MarshalJSON method", err)}
	}
	var o EnqueueOptions
	if d, ok := args.(ArgsWithOptions); ok {
		o = d.EnqueueOptions()
	}
	if opts != nil {
		o = overlay(o, *opts)
	}
	if o.Queue == "" {
		o.Queue = QueueDefault
	}
	return Job{
		Queue:                o.Queue,
		Kind:                 kind,
		Payload:              payload,
		ID:                   o.ID,
		Delay:                o.Delay,
		RunAt:                o.RunAt,
		MaxAttempts:          o.MaxAttempts,
		Priority:             o.Priority,
		UniqueKey:            o.UniqueKey,
		UniqueFor:            o.UniqueFor,
		DependsOn:            o.DependsOn,
		RunIfDependencyFails: o.RunIfDependencyFails,
		Metadata:             maps.Clone(o.Metadata), // nil stays nil: no map for a job without metadata
		Group:                o.Group,
	}, nil
}

// overlay lays top over base, as JobFor's doc says.
func overlay(base, top EnqueueOptions) EnqueueOptions {
	o := base
	if top.Queue != "" {
		o.Queue = top.Queue
	}
	if top.ID != "" {
		o.ID = top.ID
	}
	if top.Delay != 0 || !top.RunAt.IsZero() {
		o.Delay, o.RunAt = top.Delay, top.RunAt
	}
	if top.MaxAttempts != 0 {
		o.MaxAttempts = top.MaxAttempts
	}
	if top.Priority != 0 {
		o.Priority = top.Priority
	}
	if top.UniqueKey != "" {
		o.UniqueKey = top.UniqueKey
	}
	if top.UniqueFor != 0 {
		o.UniqueFor = top.UniqueFor
	}
	if top.Group != "" {
		o.Group = top.Group
	}
	if top.DependsOn != nil {
		o.DependsOn = top.DependsOn
	}
	o.RunIfDependencyFails = base.RunIfDependencyFails || top.RunIfDependencyFails
	if len(base.Metadata) > 0 && len(top.Metadata) > 0 {
		o.Metadata = maps.Clone(base.Metadata)
		maps.Copy(o.Metadata, top.Metadata)
	} else if len(top.Metadata) > 0 {
		o.Metadata = top.Metadata
	}
	return o
}

// EnqueueArgs enqueues a typed job: the Job that [JobFor] builds from args
// and opts (which may be nil), stored by [Client.Enqueue]. Its answers are
// Enqueue's: the job's id, or with a unique key another job holds, the
// holder's id and a *UniqueHeldError; a *DuplicateError for an id taken; a
// *ValidationError for args JobFor refuses or options Enqueue refuses.
func (b *Client) EnqueueArgs(ctx context.Context, args Args, opts *EnqueueOptions) (string, error) {
	j, err := JobFor(args, opts)
	if err != nil {
		return "", err
	}
	return b.Enqueue(ctx, j)
}
