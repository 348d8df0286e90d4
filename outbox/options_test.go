package outbox

import (
	"reflect"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// Every field of broker.Job survives the outbox: a field added to Job
// without the outbox carrying it fails here, instead of being dropped
// silently between the transaction and Redis.
func TestOptionsCarryEveryJobField(t *testing.T) {
	var j broker.Job
	v := reflect.ValueOf(&j).Elem()
	for i := range v.NumField() {
		f, sf := v.Field(i), v.Type().Field(i)
		if !sf.IsExported() {
			continue
		}
		// Times in whole milliseconds: what the broker itself keeps.
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
		case time.Duration:
			f.SetInt(int64(time.Duration(i+1) * 1500 * time.Millisecond))
		case time.Time:
			f.Set(reflect.ValueOf(time.UnixMilli(1_800_000_000_000 + int64(i))))
		default:
			t.Fatalf("broker.Job.%s is a %s: teach this test, and the outbox, to carry it", sf.Name, sf.Type)
		}
	}
	// RelayOnce reads these four from the table's own columns.
	got := broker.Job{ID: j.ID, Queue: j.Queue, Kind: j.Kind, Payload: j.Payload}
	if err := decodeOptions(encodeOptions(j), &got); err != nil {
		t.Fatal(err)
	}
	g := reflect.ValueOf(got)
	for i := range v.NumField() {
		name := v.Type().Field(i).Name
		a, b := v.Field(i).Interface(), g.Field(i).Interface()
		if wt, ok := a.(time.Time); ok {
			if !wt.Equal(b.(time.Time)) {
				t.Errorf("broker.Job.%s: %v after the outbox, want %v", name, b, a)
			}
		} else if !reflect.DeepEqual(a, b) {
			t.Errorf("broker.Job.%s: %v after the outbox, want %v", name, b, a)
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
