package broker_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// signupArgs has no default options.
type signupArgs struct {
	Email string `json:"email"`
}

func (signupArgs) Kind() string { return "signup" }

// invoiceArgs has default options, one of them computed from the value.
type invoiceArgs struct {
	Customer string `json:"customer"`
	Month    string `json:"month"`
}

func (invoiceArgs) Kind() string { return "invoice" }

func (a invoiceArgs) EnqueueOptions() broker.EnqueueOptions {
	return broker.EnqueueOptions{Queue: "billing", MaxAttempts: 3, Priority: 5, Delay: time.Minute,
		UniqueKey: "invoice-" + a.Customer + "-" + a.Month, DependsOn: []string{"close-" + a.Month}}
}

// givenDefaults answers whatever defaults the test gives it.
type givenDefaults struct {
	N        int `json:"n"`
	defaults broker.EnqueueOptions
}

func (givenDefaults) Kind() string                            { return "given" }
func (a givenDefaults) EnqueueOptions() broker.EnqueueOptions { return a.defaults }

type noKind struct{}

func (noKind) Kind() string { return "" }

type unencodable struct {
	Done chan struct{} `json:"done"`
}

func (unencodable) Kind() string { return "unencodable" }

// EnqueueOptions has every field of Job but Kind and Payload, with the same
// name and type: a field added to Job must be added here (and to JobFor)
// for typed jobs to set it.
func TestEnqueueOptionsHasJobsFields(t *testing.T) {
	fields := func(typ reflect.Type, skip ...string) map[string]reflect.Type {
		out := map[string]reflect.Type{}
		for f := range typ.Fields() {
			if !slices.Contains(skip, f.Name) {
				out[f.Name] = f.Type
			}
		}
		return out
	}
	job := fields(reflect.TypeFor[broker.Job](), "Kind", "Payload")
	opts := fields(reflect.TypeFor[broker.EnqueueOptions]())
	for name, typ := range job {
		if got, ok := opts[name]; !ok {
			t.Errorf("Job.%s (%s) has no EnqueueOptions.%s: add it, documented as Job.%s, and carry it in JobFor and overlay", name, typ, name, name)
		} else if got != typ {
			t.Errorf("EnqueueOptions.%s is %s; Job.%s is %s", name, got, name, typ)
		}
	}
	for name := range opts {
		if _, ok := job[name]; !ok {
			t.Errorf("EnqueueOptions.%s is not a field of Job (or is Kind or Payload, which come from the args)", name)
		}
	}
}

// Each option, set in the type's defaults or in the caller's options
// alone, reaches the Job.
func TestJobForCarriesEveryOption(t *testing.T) {
	for f := range reflect.TypeFor[broker.EnqueueOptions]().Fields() {
		t.Run(f.Name, func(t *testing.T) {
			var set broker.EnqueueOptions
			want := someValue(t, f.Type)
			reflect.ValueOf(&set).Elem().FieldByName(f.Name).Set(want)
			for how, args := range map[string]broker.Args{
				"default": givenDefaults{defaults: set},
				"option":  givenDefaults{},
			} {
				opts := &set
				if how == "default" {
					opts = nil
				}
				j, err := broker.JobFor(args, opts)
				if err != nil {
					t.Fatal(err)
				}
				if got := reflect.ValueOf(j).FieldByName(f.Name); !reflect.DeepEqual(got.Interface(), want.Interface()) {
					t.Errorf("set as %s, Job.%s = %v; want %v", how, f.Name, got, want)
				}
			}
		})
	}
}

// someValue is a non-zero value of typ.
func someValue(t *testing.T, typ reflect.Type) reflect.Value {
	t.Helper()
	if typ == reflect.TypeFor[time.Time]() {
		return reflect.ValueOf(time.Date(2031, 2, 3, 4, 5, 6, 0, time.UTC))
	}
	v := reflect.New(typ).Elem()
	switch typ.Kind() {
	case reflect.String:
		v.SetString("x1")
	case reflect.Int, reflect.Int64:
		v.SetInt(7)
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Slice:
		v = reflect.Append(reflect.MakeSlice(typ, 0, 1), someValue(t, typ.Elem()))
	case reflect.Map:
		v = reflect.MakeMap(typ)
		v.SetMapIndex(someValue(t, typ.Key()), someValue(t, typ.Elem()))
	default:
		t.Fatalf("someValue has no value of %s: add one", typ)
	}
	return v
}

func TestJobFor(t *testing.T) {
	march := invoiceArgs{Customer: "c42", Month: "2031-03"}
	t.Run("kind and payload from the value", func(t *testing.T) {
		j, err := broker.JobFor(&signupArgs{Email: "ada@example.com"}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if j.Kind != "signup" || string(j.Payload) != `{"email":"ada@example.com"}` {
			t.Errorf("kind %q, payload %s; want signup, the value's JSON", j.Kind, j.Payload)
		}
	})
	t.Run("no queue from either goes to QueueDefault", func(t *testing.T) {
		for _, opts := range []*broker.EnqueueOptions{nil, {Priority: 3}} {
			j, err := broker.JobFor(signupArgs{}, opts)
			if err != nil {
				t.Fatal(err)
			}
			if j.Queue != broker.QueueDefault {
				t.Errorf("opts %+v: queue %q; want %q", opts, j.Queue, broker.QueueDefault)
			}
		}
	})
	t.Run("defaults of the type", func(t *testing.T) {
		j, err := broker.JobFor(march, nil)
		if err != nil {
			t.Fatal(err)
		}
		want := broker.Job{Queue: "billing", Kind: "invoice", Payload: j.Payload, MaxAttempts: 3, Priority: 5,
			Delay: time.Minute, UniqueKey: "invoice-c42-2031-03", DependsOn: []string{"close-2031-03"}}
		if !reflect.DeepEqual(j, want) {
			t.Errorf("got  %+v\nwant %+v", j, want)
		}
	})
	t.Run("options overlay the defaults", func(t *testing.T) {
		at := time.Date(2031, 4, 1, 0, 0, 0, 0, time.UTC)
		j, err := broker.JobFor(march, &broker.EnqueueOptions{Priority: 9, RunAt: at, DependsOn: []string{}, ID: "inv-1"})
		if err != nil {
			t.Fatal(err)
		}
		// A non-zero field wins, a zero one keeps the default; RunAt
		// replaces the default Delay (both would be refused); an empty but
		// non-nil DependsOn drops the default's.
		want := broker.Job{Queue: "billing", Kind: "invoice", Payload: j.Payload, ID: "inv-1", MaxAttempts: 3, Priority: 9,
			RunAt: at, UniqueKey: "invoice-c42-2031-03", DependsOn: []string{}}
		if !reflect.DeepEqual(j, want) {
			t.Errorf("got  %+v\nwant %+v", j, want)
		}
	})
	t.Run("a bool is true when either says so", func(t *testing.T) {
		for _, c := range []struct{ def, opt, want bool }{{false, false, false}, {true, false, true}, {false, true, true}, {true, true, true}} {
			j, err := broker.JobFor(givenDefaults{defaults: broker.EnqueueOptions{RunIfDependencyFails: c.def}},
				&broker.EnqueueOptions{RunIfDependencyFails: c.opt})
			if err != nil {
				t.Fatal(err)
			}
			if j.RunIfDependencyFails != c.want {
				t.Errorf("default %v, option %v: %v; want %v", c.def, c.opt, j.RunIfDependencyFails, c.want)
			}
		}
	})
	t.Run("the defaults are not changed", func(t *testing.T) {
		shared := broker.EnqueueOptions{Queue: "q", Priority: 1}
		a := givenDefaults{defaults: shared}
		if _, err := broker.JobFor(a, &broker.EnqueueOptions{Queue: "other", Priority: 2}); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(a.defaults, shared) {
			t.Errorf("defaults became %+v", a.defaults)
		}
	})
}

func TestJobForRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		args broker.Args
		want []string // in the error's text
	}{
		{"nil", nil, []string{"args", "nil"}},
		{"nil pointer", (*signupArgs)(nil), []string{"*broker_test.signupArgs", "nil pointer"}},
		{"empty kind", noKind{}, []string{"broker_test.noKind", `returns ""`}},
		{"not JSON", unencodable{Done: make(chan struct{})}, []string{"broker_test.unencodable", "JSON", "chan"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := broker.JobFor(c.args, nil)
			var ve *broker.ValidationError
			if !errors.As(err, &ve) || !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("err = %v; want a *ValidationError", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			b, ctx := browseBroker(t)
			if id, err2 := b.Client().EnqueueArgs(ctx, c.args, nil); id != "" || err2 == nil || err2.Error() != err.Error() {
				t.Errorf("EnqueueArgs: %q, %v; want JobFor's error", id, err2)
			}
		})
	}
}

func TestEnqueueArgs(t *testing.T) {
	b, ctx := browseBroker(t)
	march := invoiceArgs{Customer: "c42", Month: "2031-03"}

	// The job it depends on by default, so that it is blocked, not refused.
	if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "billing", Kind: "close", ID: "close-2031-03"}); err != nil {
		t.Fatal(err)
	}
	id, err := b.Client().EnqueueArgs(ctx, march, &broker.EnqueueOptions{Priority: 9})
	if err != nil {
		t.Fatal(err)
	}
	j, err := b.Inspector().Job(ctx, "billing", id)
	if err != nil {
		t.Fatal(err)
	}
	var got invoiceArgs
	if err := json.Unmarshal(j.Payload, &got); err != nil || got != march {
		t.Errorf("payload %s reads back as %+v (%v); want %+v", j.Payload, got, err, march)
	}
	if j.Kind != "invoice" || j.Priority != 9 || j.MaxAttempts != 3 || j.State != broker.StateBlocked {
		t.Errorf("kind %q, priority %d, max attempts %d, state %s; want invoice, 9, 3, blocked", j.Kind, j.Priority, j.MaxAttempts, j.State)
	}

	t.Run("a held unique key answers the holder", func(t *testing.T) {
		again, err := b.Client().EnqueueArgs(ctx, march, nil)
		var held *broker.UniqueHeldError
		if !errors.As(err, &held) || again != id || held.HolderID != id || held.Key != "invoice-c42-2031-03" {
			t.Fatalf("second enqueue: %q, %v; want the holder %q and a *UniqueHeldError", again, err, id)
		}
	})
	t.Run("a taken id is a duplicate", func(t *testing.T) {
		opts := &broker.EnqueueOptions{ID: "signup-1"}
		if _, err := b.Client().EnqueueArgs(ctx, signupArgs{Email: "a@example.com"}, opts); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Client().EnqueueArgs(ctx, signupArgs{Email: "b@example.com"}, opts); !errors.Is(err, broker.ErrJobExists) {
			t.Fatalf("second enqueue with id signup-1: %v; want ErrJobExists", err)
		}
	})
	t.Run("options Enqueue refuses", func(t *testing.T) {
		id, err := b.Client().EnqueueArgs(ctx, signupArgs{}, &broker.EnqueueOptions{Priority: 1000})
		var ve *broker.ValidationError
		if id != "" || !errors.As(err, &ve) || ve.Field != "priority" {
			t.Fatalf("priority 1000: %q, %v; want a *ValidationError on priority", id, err)
		}
	})
}
