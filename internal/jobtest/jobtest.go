// Package jobtest builds a broker.Job with every field set, for the tests
// that a job survives each way it is written outside Go: its JSON form,
// an outbox row, a --jsonl line, a periodic job in workerd.yaml. A field
// added to broker.Job is set here by its type, so each of those tests
// fails until its path carries the new field.
package jobtest

import (
	"fmt"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// Full answers a job with every exported field set to a value of its own,
// in the resolution the broker keeps (durations and times in whole
// milliseconds). A field of a type it does not know fails t.
func Full(t testing.TB) broker.Job {
	t.Helper()
	var j broker.Job
	v := reflect.ValueOf(&j).Elem()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		switch f.Interface().(type) {
		case string:
			f.SetString("v-" + sf.Name)
		case int:
			f.SetInt(int64(10 + i))
		case bool:
			f.SetBool(true)
		case []byte:
			f.SetBytes([]byte(`{"field":"` + sf.Name + `"}`))
		case []string:
			f.Set(reflect.ValueOf([]string{"a-" + sf.Name, "b-" + sf.Name}))
		case map[string]string:
			f.Set(reflect.ValueOf(map[string]string{"a-" + sf.Name: "1", "b-" + sf.Name: "2"}))
		case time.Duration:
			f.SetInt(int64(time.Duration(i+1) * 1500 * time.Millisecond))
		case time.Time:
			f.Set(reflect.ValueOf(time.UnixMilli(1_800_000_000_000 + int64(i))))
		default:
			t.Fatalf("broker.Job.%s is a %s: teach jobtest.Full, and the job's JSON form (broker/jobcodec.go), to carry it", sf.Name, sf.Type)
		}
	}
	return j
}

// Diff names the fields in which got differs from want, each with both
// values, leaving out the fields named in skip. Times are compared as
// instants.
func Diff(want, got broker.Job, skip ...string) []string {
	var out []string
	w, g := reflect.ValueOf(want), reflect.ValueOf(got)
	for i := range w.NumField() {
		name := w.Type().Field(i).Name
		if !w.Type().Field(i).IsExported() || slices.Contains(skip, name) {
			continue
		}
		a, b := w.Field(i).Interface(), g.Field(i).Interface()
		same := reflect.DeepEqual(a, b)
		if at, ok := a.(time.Time); ok {
			same = at.Equal(b.(time.Time))
		}
		if !same {
			out = append(out, fmtField(name, b, a))
		}
	}
	return out
}

func fmtField(name string, got, want any) string {
	if g, ok := got.([]byte); ok {
		got, want = string(g), string(want.([]byte))
	}
	return fmt.Sprintf("broker.Job.%s: %v, want %v", name, got, want)
}
