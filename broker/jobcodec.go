package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"reflect"
	"slices"
	"strings"
	"time"
)

// A Job has one JSON form, and every place a job is written outside Go
// uses it: the outbox's options column, a line of `workerd enqueue
// --jsonl`, a periodic job in workerd.yaml. Each of those once had its own
// list of fields, and a field added to Job was dropped by the one that was
// not told; now a field added to Job is added here, once, and the test
// beside this file fails until it is.
//
// The form, as MarshalJSON writes it (fields at their zero value are
// left out):
//
//	{"queue": "mail", "kind": "send", "payload": {...}, "id": "...",
//	 "delay_ms": 1500, "run_at_ms": 1800000000000, "max_attempts": 3,
//	 "priority": 5, "unique_key": "k", "unique_for_ms": 3600000,
//	 "depends_on": ["a", "b"], "run_if_dependency_fails": true,
//	 "metadata": {"request_id": "r-1"}, "group": "acme"}
//
// Durations and times are whole milliseconds, the broker's own resolution,
// under names that say so. These are the names the outbox has always
// stored, so rows written before this form existed read as they were
// meant, and a relay of an older version still reads rows written by this
// one.
//
// For people writing jobs by hand, UnmarshalJSON also reads "delay" and
// "unique_for" as Go durations ("30s", "1h") and "at" as an RFC 3339 time:
// the spellings --jsonl has always taken. Giving both spellings of one
// field is refused. MarshalJSON never writes them.

// jobJSON is the JSON form of a Job. Every field of Job has its field
// here, and nothing else does.
type jobJSON struct {
	Queue                string            `json:"queue,omitempty"`
	Kind                 string            `json:"kind,omitempty"`
	Payload              json.RawMessage   `json:"payload,omitempty"`
	ID                   string            `json:"id,omitempty"`
	DelayMS              int64             `json:"delay_ms,omitempty"`
	RunAtMS              int64             `json:"run_at_ms,omitempty"`
	MaxAttempts          int               `json:"max_attempts,omitempty"`
	Priority             int               `json:"priority,omitempty"`
	UniqueKey            string            `json:"unique_key,omitempty"`
	UniqueForMS          int64             `json:"unique_for_ms,omitempty"`
	DependsOn            []string          `json:"depends_on,omitempty"`
	RunIfDependencyFails bool              `json:"run_if_dependency_fails,omitempty"`
	Metadata             map[string]string `json:"metadata,omitempty"`
	Group                string            `json:"group,omitempty"`

	// The spellings for people: read, never written.
	Delay     string  `json:"delay,omitempty"`
	At        *string `json:"at,omitempty"`
	UniqueFor string  `json:"unique_for,omitempty"`
}

// jobJSONFields are the keys of the JSON form.
var jobJSONFields = func() []string {
	t := reflect.TypeFor[jobJSON]()
	names := make([]string, 0, t.NumField())
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	return names
}()

// MarshalJSON writes j in its JSON form. The payload is embedded as JSON
// (compacted), so a payload that is not JSON has no JSON form: that is an
// error. Delay, RunAt and UniqueFor are written in whole milliseconds.
func (j Job) MarshalJSON() ([]byte, error) {
	if len(j.Payload) > 0 && !json.Valid(j.Payload) {
		return nil, &ValidationError{Field: "payload", Reason: "is not JSON, so the job has no JSON form"}
	}
	w := jobJSON{
		Queue: j.Queue, Kind: j.Kind, Payload: j.Payload, ID: j.ID,
		DelayMS: j.Delay.Milliseconds(), MaxAttempts: j.MaxAttempts, Priority: j.Priority,
		UniqueKey: j.UniqueKey, UniqueForMS: j.UniqueFor.Milliseconds(),
		DependsOn: j.DependsOn, RunIfDependencyFails: j.RunIfDependencyFails, Metadata: j.Metadata,
		Group: j.Group,
	}
	if !j.RunAt.IsZero() {
		w.RunAtMS = j.RunAt.UnixMilli()
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads a job's JSON form into j, replacing all of it. It is
// strict: a key that is not a field of the form (matched without regard
// to case, as encoding/json does), a value of the wrong type, a duration
// without a unit, both spellings of one field, a field or a metadata key
// given twice, or anything after the object answer a *ValidationError (errors.Is ErrInvalid) whose Field is
// the key at fault. It checks the form, not the job: Enqueue and
// ValidateJob still check the values.
func (j *Job) UnmarshalJSON(data []byte) error {
	var w jobJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return formError(data, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return &ValidationError{Field: "job", Reason: "is not one JSON object: more follows it"}
	}
	if err := duplicateKeys(data); err != nil {
		return err
	}
	// A time.Duration holds about 292 years; more would wrap around.
	const maxMS = math.MaxInt64 / int64(time.Millisecond)
	for _, f := range []struct {
		field string
		ms    int64
	}{{"delay_ms", w.DelayMS}, {"unique_for_ms", w.UniqueForMS}} {
		if f.ms > maxMS || f.ms < -maxMS {
			return &ValidationError{Field: f.field, Value: fmt.Sprint(f.ms), Reason: "is longer than a duration can be (about 292 years)"}
		}
	}
	out := Job{
		Queue: w.Queue, Kind: w.Kind, Payload: []byte(w.Payload), ID: w.ID,
		Delay: time.Duration(w.DelayMS) * time.Millisecond, MaxAttempts: w.MaxAttempts, Priority: w.Priority,
		UniqueKey: w.UniqueKey, UniqueFor: time.Duration(w.UniqueForMS) * time.Millisecond,
		DependsOn: w.DependsOn, RunIfDependencyFails: w.RunIfDependencyFails, Metadata: w.Metadata,
		Group: w.Group,
	}
	if w.RunAtMS != 0 {
		out.RunAt = time.UnixMilli(w.RunAtMS)
	}
	for _, d := range []struct {
		field, text, other string
		ms                 int64
		to                 *time.Duration
	}{{"delay", w.Delay, "delay_ms", w.DelayMS, &out.Delay}, {"unique_for", w.UniqueFor, "unique_for_ms", w.UniqueForMS, &out.UniqueFor}} {
		if d.text == "" {
			continue
		}
		if d.ms != 0 {
			return &ValidationError{Field: d.field, Value: d.text, Reason: fmt.Sprintf("give %s or %s, not both", d.field, d.other)}
		}
		v, err := time.ParseDuration(d.text)
		if err != nil {
			return &ValidationError{Field: d.field, Value: d.text, Reason: "is not a duration (write it with a unit: 30s, 5m)"}
		}
		*d.to = v
	}
	if w.At != nil {
		if w.RunAtMS != 0 {
			return &ValidationError{Field: "at", Value: *w.At, Reason: "give at or run_at_ms, not both"}
		}
		if err := out.RunAt.UnmarshalText([]byte(*w.At)); err != nil {
			return &ValidationError{Field: "at", Value: *w.At, Reason: "is not an RFC 3339 time such as 2026-12-01T09:00:00Z"}
		}
	}
	*j = out
	return nil
}

// duplicateKeys refuses a job's form, valid JSON, that gives a field more
// than once (keys match fields without regard to case, as encoding/json
// does), or a metadata key more than once: encoding/json would read the
// last value, where a gateway or a log that read the first would see
// another job. The payload's keys are its own business.
func duplicateKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil // null: no keys
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		k, ok := t.(string)
		if err != nil || !ok {
			return nil // cannot be: the form decoded
		}
		if seen[strings.ToLower(k)] {
			return &ValidationError{Field: k, Reason: "is given more than once (keys match without regard to case); give each field once"}
		}
		seen[strings.ToLower(k)] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if strings.EqualFold(k, "metadata") {
			if dup := duplicateKey(v); dup != "" {
				return &ValidationError{Field: "metadata", Value: dup, Reason: fmt.Sprintf("gives the key %q more than once; give each key once", dup)}
			}
		}
	}
	return nil
}

// duplicateKey is the first key that object, valid JSON, gives twice
// (exact match), or "".
func duplicateKey(object []byte) string {
	dec := json.NewDecoder(bytes.NewReader(object))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return ""
	}
	seen := map[string]bool{}
	for dec.More() {
		t, err := dec.Token()
		k, ok := t.(string)
		if err != nil || !ok {
			return ""
		}
		if seen[k] {
			return k
		}
		seen[k] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return ""
		}
	}
	return ""
}

// formError says what is wrong with data, which is not a job's form:
// decoding it answered err.
func formError(data []byte, err error) error {
	// encoding/json names an unknown key only in its message: find it.
	var keys map[string]json.RawMessage
	if json.Unmarshal(data, &keys) == nil {
		for _, k := range slices.Sorted(maps.Keys(keys)) {
			if !slices.ContainsFunc(jobJSONFields, func(f string) bool { return strings.EqualFold(f, k) }) {
				return &ValidationError{Field: k, Reason: "is not a field of a job; a job has " + strings.Join(jobJSONFields, ", ")}
			}
		}
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field == "" {
			return &ValidationError{Field: "job", Reason: fmt.Sprintf("is %s; a job is an object", jsonKind(te.Value))}
		}
		want := jsonWanted(te.Type)
		if te.Field == "delay" || te.Field == "unique_for" {
			want = `a duration with a unit, like "30s" or "5m"`
		}
		return &ValidationError{Field: te.Field, Reason: fmt.Sprintf("is %s; it must be %s", jsonKind(te.Value), want)}
	}
	return &ValidationError{Field: "job", Reason: fmt.Sprintf("is not one JSON object (%v); write a job as one object", err)}
}

// jsonKind names a kind of JSON value as UnmarshalTypeError gives it
// ("string", "number", "number 1.5", "array", "object", "bool").
func jsonKind(v string) string {
	switch kind, _, _ := strings.Cut(v, " "); kind {
	case "array", "object":
		return "an " + kind
	case "bool":
		return "true or false"
	default:
		return "a " + kind
	}
}

// jsonWanted says what to write for a field of Go type t.
func jsonWanted(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String, reflect.Pointer:
		return "a string"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "an array of strings"
	case reflect.Map:
		return "an object of strings"
	}
	return "a " + t.String()
}

// JobFields lists the keys of a job's JSON form: those MarshalJSON writes,
// then the spellings for people that only UnmarshalJSON reads. Tools that
// embed a job in a larger document (workerd's periodic jobs) check keys
// against it.
func JobFields() []string { return slices.Clone(jobJSONFields) }
