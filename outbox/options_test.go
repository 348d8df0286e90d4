package outbox

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/jobtest"
)

// Every field of broker.Job survives the outbox: a field added to Job
// without the outbox carrying it fails here, instead of being dropped
// silently between the transaction and Redis.
func TestOptionsCarryEveryJobField(t *testing.T) {
	j := jobtest.Full(t)
	// RelayOnce reads these four from the table's own columns.
	got := broker.Job{ID: j.ID, Queue: j.Queue, Kind: j.Kind, Payload: j.Payload}
	opts, err := encodeOptions(j)
	if err != nil {
		t.Fatal(err)
	}
	if err := decodeOptions(opts, &got); err != nil {
		t.Fatal(err)
	}
	for _, d := range jobtest.Diff(j, got) {
		t.Errorf("%s after the outbox (options %s)", d, opts)
	}
	// The columns' fields are not stored twice.
	for _, column := range []string{"id", "queue", "kind", "payload"} {
		if strings.Contains(string(opts), `"`+column+`"`) {
			t.Errorf("options %s hold the %s, which has a column", opts, column)
		}
	}
}

// Rows written before the options grew new fields still read.
func TestOptionsOfOldRows(t *testing.T) {
	var got broker.Job
	old := `{"max_attempts":3,"priority":2,"delay_ms":1500,"unique_key":"u","unique_for_ms":60000}`
	if err := decodeOptions([]byte(old), &got); err != nil {
		t.Fatal(err)
	}
	want := broker.Job{MaxAttempts: 3, Priority: 2, Delay: 1500 * time.Millisecond, UniqueKey: "u", UniqueFor: time.Minute}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("old row read as %+v, want %+v", got, want)
	}
}

// Options a relay cannot read as the job's are refused (the row is then
// moved aside with the reason), never half read.
func TestOptionsRefused(t *testing.T) {
	for _, opts := range []string{
		`{"priority":"high"}`,
		`{"priorty":3}`,
		`{"queue":"other"}`,
		`{"payload":{"a":1}}`,
		`{"delay_ms":1000,"delay":"1s"}`,
		`[1]`,
	} {
		j := broker.Job{ID: "i", Queue: "q", Kind: "k"}
		if err := decodeOptions([]byte(opts), &j); err == nil {
			t.Errorf("options %s read as %+v; want an error", opts, j)
		}
	}
}

func TestRelayOptions(t *testing.T) {
	if o := (RelayOptions{}).withDefaults(); o.Table != TableDefault || o.Batch != BatchDefault {
		t.Fatalf("defaults %+v", o)
	}
	if o := (RelayOptions{Table: "t", Batch: 7}).withDefaults(); o.Table != "t" || o.Batch != 7 {
		t.Fatalf("given options changed by the defaults: %+v", o)
	}
	if err := (RelayOptions{Batch: -1}).withDefaults().validate(); err == nil {
		t.Fatal("a negative batch was accepted")
	}
	if _, err := NewRelay(nil, nil, RelayOptions{}); err == nil {
		t.Fatal("NewRelay without a database or broker was accepted")
	}
}
