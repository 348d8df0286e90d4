package broker_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/jobtest"
)

// Every field of broker.Job survives its JSON form: a field added to Job
// without a place in the form fails here.
func TestJobJSONCarriesEveryField(t *testing.T) {
	t.Parallel()
	want := jobtest.Full(t)
	data, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}
	var got broker.Job
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatalf("reading back %s: %v", data, err)
	}
	for _, d := range jobtest.Diff(want, got) {
		t.Errorf("%s (JSON form %s)", d, data)
	}
}

// The form MarshalJSON writes: the names the outbox has always stored,
// durations and times in milliseconds, zero fields left out.
func TestJobJSONForm(t *testing.T) {
	t.Parallel()
	j := broker.Job{Queue: "q", Kind: "k", Payload: []byte(`{"a": 1}`), Delay: 1500 * time.Millisecond,
		UniqueKey: "u", UniqueFor: time.Hour, DependsOn: []string{"p"}}
	data, err := json.Marshal(j)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"queue":"q","kind":"k","payload":{"a":1},"delay_ms":1500,"unique_key":"u","unique_for_ms":3600000,"depends_on":["p"]}`
	if string(data) != want {
		t.Fatalf("JSON form %s, want %s", data, want)
	}
	if data, err := json.Marshal(broker.Job{}); err != nil || string(data) != `{}` {
		t.Fatalf("the zero job's form is %s, %v; want {}", data, err)
	}
	if _, err := json.Marshal(broker.Job{Kind: "k", Payload: []byte("not json")}); !errors.Is(err, broker.ErrInvalid) {
		t.Fatalf("a payload that is not JSON: %v, want an ErrInvalid", err)
	}
}

// What people write by hand (the --jsonl spellings) reads as the same job
// as the written form.
func TestJobJSONSpellingsForPeople(t *testing.T) {
	t.Parallel()
	var a, b broker.Job
	if err := json.Unmarshal([]byte(`{"kind":"k","delay":"1.5s","unique_key":"u","unique_for":"1h"}`), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`{"kind":"k","delay_ms":1500,"unique_key":"u","unique_for_ms":3600000}`), &b); err != nil {
		t.Fatal(err)
	}
	if d := jobtest.Diff(b, a); d != nil {
		t.Fatalf("the spellings differ: %v", d)
	}
	var at broker.Job
	if err := json.Unmarshal([]byte(`{"kind":"k","at":"2026-12-01T09:00:00Z"}`), &at); err != nil ||
		!at.RunAt.Equal(time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)) {
		t.Fatalf("at read as %v, %v", at.RunAt, err)
	}
	// Keys match without regard to case, as encoding/json's do.
	var upper broker.Job
	if err := json.Unmarshal([]byte(`{"KIND":"k","Max_Attempts":3}`), &upper); err != nil || upper.Kind != "k" || upper.MaxAttempts != 3 {
		t.Fatalf("keys in capitals read as %+v, %v", upper, err)
	}
}

// Reading is strict, and each refusal names the key at fault.
func TestJobJSONRefuses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, json, field, says string }{
		{"UnknownField", `{"kind":"k","prioirty":3}`, "prioirty", "is not a field of a job"},
		{"WrongType", `{"kind":"k","max_attempts":"3"}`, "max_attempts", "a whole number"},
		{"WrongElement", `{"kind":"k","depends_on":[1]}`, "depends_on", "a string"},
		{"DurationWithoutUnit", `{"kind":"k","delay":"5"}`, "delay", "with a unit"},
		{"DurationAsNumber", `{"kind":"k","unique_for":60}`, "unique_for", "with a unit"},
		{"DurationTooLong", `{"kind":"k","unique_for_ms":9223372036854775807}`, "unique_for_ms", "longer than a duration can be"},
		{"BothSpellings", `{"kind":"k","delay":"1s","delay_ms":1000}`, "delay", "not both"},
		{"BothTimes", `{"kind":"k","at":"2026-12-01T09:00:00Z","run_at_ms":1}`, "at", "not both"},
		{"BadTime", `{"kind":"k","at":"tomorrow"}`, "at", "RFC 3339"},
		{"NotAnObject", `[]`, "job", "is an array; a job is an object"},
		{"NotJSON", `{"kind":`, "job", "not one JSON object"},
		{"MoreAfter", `{"kind":"k"} {"kind":"j"}`, "job", "not one JSON object"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := broker.Job{Kind: "before"}
			err := j.UnmarshalJSON([]byte(tc.json))
			var ve *broker.ValidationError
			if !errors.As(err, &ve) || ve.Field != tc.field || !strings.Contains(err.Error(), tc.says) {
				t.Fatalf("UnmarshalJSON(%s) = %v; want a ValidationError of field %s saying %q", tc.json, err, tc.field, tc.says)
			}
			if j.Kind != "before" {
				t.Fatalf("a refused form changed the job: %+v", j)
			}
		})
	}
}

// A key given twice is refused, not read as its last value: a gateway or
// a log that reads the first one would see another job than the one
// enqueued. Keys match fields without regard to case, so "kind" and
// "KIND" are the same key given twice. (Both were accepted, the last
// value winning.)
func TestJobJSONRefusesDuplicateKeys(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, field string }{
		{`{"kind":"report","kind":"wipe"}`, "kind"},
		{`{"kind":"report","KIND":"wipe"}`, "KIND"},
		{`{"kind":"k","priority":1,"payload":{},"Priority":9}`, "Priority"},
		{`{"kind":"k","metadata":{"tenant":"a","tenant":"b"}}`, "metadata"},
		{`{"kind":"k","metadata":{"a":"1"},"metadata":{"b":"2"}}`, "metadata"},
	} {
		var j broker.Job
		err := j.UnmarshalJSON([]byte(c.in))
		var ve *broker.ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field || !strings.Contains(ve.Error(), "more than once") {
			t.Errorf("%s: %v (%+v), want a refusal of field %q given more than once", c.in, err, ve, c.field)
		}
	}
	// Keys inside the payload are the payload's own business, and one
	// key per field (in any case) is still read.
	var j broker.Job
	if err := j.UnmarshalJSON([]byte(`{"Kind":"k","payload":{"a":1,"a":2},"metadata":{"A":"1","a":"2"}}`)); err != nil || j.Kind != "k" || len(j.Metadata) != 2 {
		t.Fatalf("%+v %v", j, err)
	}
}
