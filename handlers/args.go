package handlers

import (
	"context"
	"fmt"
	"reflect"
)

// Register registers fn for the kind that T names: the zero T's Kind(),
// the same method that broker.Args has, so the producer and the handler
// share one declaration of the kind. The payload is decoded as JSON does:
// unknown fields are allowed, and a payload that does not decode fails the
// job permanently.
//
//	handlers.Register(mux, func(ctx context.Context, job *handlers.Job, args WelcomeArgs) error { … })
//
// Like Mux.Handle it panics on a misconfiguration found at startup: a Kind
// that returns "" or that panics on the zero value (for a pointer type, a
// nil pointer), and a kind registered twice.
func Register[T interface{ Kind() string }](m *Mux, fn func(ctx context.Context, job *Job, args T) error) {
	if fn == nil {
		panic(fmt.Sprintf("fenceq: handlers.Register[%s]: nil function", typeName[T]()))
	}
	m.Handle(kindOf[T](), JSON(fn))
}

// kindOf is the zero T's Kind, or a panic that says how to declare it.
func kindOf[T interface{ Kind() string }]() string {
	kind, panicked := zeroKind[T]()
	switch {
	case panicked != nil && reflect.TypeFor[T]().Kind() == reflect.Pointer:
		// The usual cause: Kind has a value receiver, which a nil pointer
		// cannot call.
		panic(fmt.Sprintf("fenceq: handlers.Register[%s]: Kind panicked on a nil %s (%v). Register the type itself, %s, or declare Kind on the pointer receiver, returning a constant without reading the value",
			typeName[T](), typeName[T](), panicked, reflect.TypeFor[T]().Elem()))
	case panicked != nil:
		panic(fmt.Sprintf("fenceq: handlers.Register[%s]: Kind panicked on the zero value (%v). Kind must not read the value; declare it on the value receiver and return a constant", typeName[T](), panicked))
	case kind == "":
		panic(fmt.Sprintf("fenceq: handlers.Register[%s]: Kind returned \"\"; return the job kind's name, a constant", typeName[T]()))
	}
	return kind
}

// zeroKind calls Kind on the zero T and answers what it returned, or what
// it panicked with.
func zeroKind[T interface{ Kind() string }]() (kind string, panicked any) {
	defer func() { panicked = recover() }()
	var zero T
	return zero.Kind(), nil
}

// typeName names T, also when T is an interface (whose zero %T is "<nil>").
func typeName[T any]() string { return fmt.Sprintf("%T", (*T)(nil))[1:] }
