package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/internal/jobtest"
)

// Every field of broker.Job survives a --jsonl line and a periodic job of
// workerd.yaml, both written in the job's JSON form: a field added to Job
// that one of them drops fails here.
func TestEveryJobFieldThroughWorkerd(t *testing.T) {
	t.Parallel()
	want := jobtest.Full(t)
	form, err := json.Marshal(want)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("JSONL", func(t *testing.T) {
		t.Parallel()
		line := want
		line.Queue = "" // given on the command line
		text, err := json.Marshal(line)
		if err != nil {
			t.Fatal(err)
		}
		for _, text := range [][]byte{text, form} {
			got, err := parseJSONL(want.Queue, text)
			if err != nil {
				t.Fatalf("parseJSONL(%s): %v", text, err)
			}
			for _, d := range jobtest.Diff(want, got) {
				t.Errorf("%s after the line %s", d, text)
			}
		}
	})

	t.Run("Periodic", func(t *testing.T) {
		t.Parallel()
		tmpl := want
		tmpl.ID = "" // set at each tick
		fields, err := json.Marshal(tmpl)
		if err != nil {
			t.Fatal(err)
		}
		// JSON is YAML: the entry is the job's form with the schedule's
		// fields in front.
		entry := `{"name": "n", "every": "1m", ` + strings.TrimPrefix(string(fields), "{")
		path := writeConfig(t, "pools:\n  - queues: [a]\nperiodic:\n  - "+entry+"\nhandlers:\n  k: {exec: {command: [\"true\"]}}\n")
		c, err := loadConfig(path)
		if err != nil {
			t.Fatal(err)
		}
		p, err := c.periodic(0, c.Periodic[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range jobtest.Diff(want, p.Job, "ID") {
			t.Errorf("%s after the periodic entry %s", d, entry)
		}
	})
}

// A periodic job takes the job's fields as YAML, in the spellings people
// write (delay: 5m), and refuses what is not a job's field, with the line.
func TestPeriodicJobFields(t *testing.T) {
	t.Parallel()
	const head = "pools:\n  - queues: [a]\nperiodic:\n  - name: n\n    every: 1m\n    queue: a\n    kind: k\n"
	const tail = "handlers:\n  k: {exec: {command: [\"true\"]}}\n"
	c, err := loadConfig(writeConfig(t, head+"    unique_key: nightly\n    unique_for: 1h\n    delay: 5m\n    max_attempts: 3\n"+tail))
	if err != nil {
		t.Fatal(err)
	}
	p, err := c.periodic(0, c.Periodic[0])
	if err != nil || p.Job.UniqueKey != "nightly" || p.Job.UniqueFor.String() != "1h0m0s" || p.Job.Delay.String() != "5m0s" || p.Job.MaxAttempts != 3 {
		t.Fatalf("periodic job %+v, %v", p.Job, err)
	}
	for _, tc := range []struct{ name, field, want string }{
		{"Misspelt", "    prioirty: 3\n", `line 8: periodic[0]: unknown field "prioirty" in a periodic job; did you mean "priority"?`},
		{"ID", "    id: x\n", "line 8: periodic[0]: a periodic job has no id"},
		{"DurationWithoutUnit", "    delay: 30\n", `line 8: periodic[0].delay: is a number; it must be a duration with a unit`},
		{"NotANumber", "    priority: high\n", "line 8: periodic[0].priority: is a string; it must be a whole number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := loadConfig(writeConfig(t, head+tc.field+tail))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("loadConfig: %v; want %q", err, tc.want)
			}
		})
	}
}
