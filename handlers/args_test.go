package handlers_test

import (
	"context"
	"errors"
	"fmt"
	"go/build"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
)

type welcomeArgs struct {
	To string `json:"to"`
}

func (welcomeArgs) Kind() string { return "welcome" }

// pointerKind declares Kind on the pointer receiver, without reading it: a
// nil *pointerKind answers too.
type pointerKind struct {
	N int `json:"n"`
}

func (*pointerKind) Kind() string { return "pointer" }

// readsValue's Kind reads the value, which the zero value cannot answer.
type readsValue struct{ name *string }

func (a readsValue) Kind() string { return *a.name }

type emptyKind struct{}

func (emptyKind) Kind() string { return "" }

func run(t *testing.T, mux *handlers.Mux, kind, payload string) error {
	t.Helper()
	return mux.ProcessJob(context.Background(), handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{
		ID: "j1", Queue: "q", Kind: kind, Payload: []byte(payload), Attempt: 1, MaxAttempts: 3, Generation: 1}}))
}

func TestRegister(t *testing.T) {
	mux := handlers.NewMux()
	var got []string
	handlers.Register(mux, func(ctx context.Context, job *handlers.Job, a welcomeArgs) error {
		got = append(got, job.Kind+" "+a.To)
		return nil
	})
	handlers.Register(mux, func(ctx context.Context, job *handlers.Job, a *pointerKind) error {
		got = append(got, fmt.Sprint(job.Kind, " ", a.N))
		return nil
	})
	if k := mux.Kinds(); len(k) != 2 || k[0] != "pointer" || k[1] != "welcome" {
		t.Fatalf("kinds %v; want [pointer welcome], each type's Kind", k)
	}

	t.Run("decodes the payload, unknown fields allowed", func(t *testing.T) {
		got = nil
		if err := run(t, mux, "welcome", `{"to":"ada@example.com","from":"old producer"}`); err != nil {
			t.Fatal(err)
		}
		if err := run(t, mux, "pointer", `{"n":7}`); err != nil {
			t.Fatal(err)
		}
		if len(got) != 2 || got[0] != "welcome ada@example.com" || got[1] != "pointer 7" {
			t.Fatalf("handlers saw %q", got)
		}
	})
	t.Run("a payload that does not decode fails permanently", func(t *testing.T) {
		err := run(t, mux, "welcome", `{"to":42}`)
		var perm *handlers.PermanentError
		if !errors.As(err, &perm) || !strings.Contains(err.Error(), "welcomeArgs") {
			t.Fatalf("err = %v; want a permanent error naming the type", err)
		}
	})
}

func TestRegisterRefuses(t *testing.T) {
	for _, c := range []struct {
		name     string
		register func(m *handlers.Mux)
		want     []string // in the panic's message
	}{
		{"Kind on the value receiver, T a pointer", func(m *handlers.Mux) {
			handlers.Register(m, func(context.Context, *handlers.Job, *welcomeArgs) error { return nil })
		}, []string{"Register[*handlers_test.welcomeArgs]", "panicked on a nil *handlers_test.welcomeArgs", "Register the type itself, handlers_test.welcomeArgs"}},
		{"Kind reads the value", func(m *handlers.Mux) {
			handlers.Register(m, func(context.Context, *handlers.Job, readsValue) error { return nil })
		}, []string{"Register[handlers_test.readsValue]", "Kind must not read the value"}},
		{"empty kind", func(m *handlers.Mux) {
			handlers.Register(m, func(context.Context, *handlers.Job, emptyKind) error { return nil })
		}, []string{"Register[handlers_test.emptyKind]", `Kind returned ""`}},
		{"nil function", func(m *handlers.Mux) {
			handlers.Register[welcomeArgs](m, nil)
		}, []string{"Register[handlers_test.welcomeArgs]", "nil function"}},
		{"kind registered twice", func(m *handlers.Mux) {
			m.HandleFunc("welcome", func(context.Context, *handlers.Job) error { return nil })
			handlers.Register(m, func(context.Context, *handlers.Job, welcomeArgs) error { return nil })
		}, []string{"welcome registered twice"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			mux := handlers.NewMux()
			msg := func() (msg string) {
				defer func() { msg = fmt.Sprint(recover()) }()
				c.register(mux)
				return ""
			}()
			for _, w := range c.want {
				if !strings.Contains(msg, w) {
					t.Errorf("panic %q does not say %q", msg, w)
				}
			}
		})
	}
}

// Register's constraint is Kind() string, not broker.Args, so that
// handlers stays free of the broker (see the package doc: it never talks to
// Redis) and a handler's package need not import it.
func TestHandlersImportNoBroker(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if imp == "github.com/fenceq/fenceq/broker" || strings.HasPrefix(imp, "github.com/fenceq/fenceq/worker") {
			t.Errorf("package handlers imports %s; it must not import the broker or the worker", imp)
		}
	}
}
