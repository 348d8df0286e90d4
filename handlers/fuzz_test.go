package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/handlers"
)

type fuzzArgs struct {
	Name  string            `json:"name"`
	N     int               `json:"n"`
	Tags  []string          `json:"tags"`
	Attrs map[string]string `json:"attrs"`
	Ptr   *float64          `json:"ptr"`
}

// FuzzJSONHandler: handlers.JSON either runs the function with exactly the
// args encoding/json decodes from the payload, or fails permanently, naming
// the kind, without running it. It never panics.
func FuzzJSONHandler(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"name":"a","n":3,"tags":["x","y"],"attrs":{"k":"v"},"ptr":1.5}`,
		`{"name":1}`, `{"n":1e400}`, `{"n":1.5}`, `{"extra":true}`, `null`, `[]`, `"s"`, ``,
		`{"name":"a"} trailing`, `{"tags":[1]}`, "{\"name\":\"\xff\"}", `{"name":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		var (
			called bool
			got    fuzzArgs
		)
		h := handlers.JSON(func(ctx context.Context, job *handlers.Job, args fuzzArgs) error {
			called, got = true, args
			return nil
		})
		err := h.ProcessJob(context.Background(), newJob("fuzz.kind", payload))
		var want fuzzArgs
		wantErr := json.Unmarshal(payload, &want)
		if err != nil {
			var pe *handlers.PermanentError
			if !errors.As(err, &pe) {
				t.Fatalf("error %T %v; want a *handlers.PermanentError", err, err)
			}
			if called {
				t.Fatalf("the function ran although decoding failed: %v", err)
			}
			if wantErr == nil {
				t.Fatalf("payload %q decodes, but the handler failed: %v", payload, err)
			}
			if !strings.Contains(err.Error(), "fuzz.kind") {
				t.Fatalf("error does not name the kind: %v", err)
			}
			return
		}
		if !called {
			t.Fatal("nil error, but the function did not run")
		}
		if wantErr != nil {
			t.Fatalf("payload %q does not decode (%v), but the handler ran", payload, wantErr)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("args %+v, want %+v", got, want)
		}
	})
}
