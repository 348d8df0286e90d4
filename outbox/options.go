package outbox

import (
	"encoding/json"
	"fmt"

	"github.com/fenceq/fenceq/broker"
)

// A row keeps a job's ID, Queue, Kind and Payload in columns of their own,
// and every other field in its options column, in broker.Job's JSON form
// (which leaves out fields at their zero value). The form keeps the names
// rows have always had, so rows written by an older version read as they
// were meant, and an older relay reads rows written by this one.

// encodeOptions is the options column of j.
func encodeOptions(j broker.Job) ([]byte, error) {
	j.ID, j.Queue, j.Kind, j.Payload = "", "", "", nil
	opts, err := json.Marshal(j)
	if err != nil {
		return nil, fmt.Errorf("fenceq: outbox: encode options: %w", err)
	}
	return opts, nil
}

// decodeOptions sets the fields of j that are not in columns from opts.
// Options that carry one of those fields are refused: the row would say
// two things about the job.
func decodeOptions(opts []byte, j *broker.Job) error {
	var o broker.Job
	if err := json.Unmarshal(opts, &o); err != nil {
		return err
	}
	for _, f := range []struct{ name, value string }{{"id", o.ID}, {"queue", o.Queue}, {"kind", o.Kind}, {"payload", string(o.Payload)}} {
		if f.value != "" {
			return fmt.Errorf("they hold the job's %s, which is a column of its own", f.name)
		}
	}
	o.ID, o.Queue, o.Kind, o.Payload = j.ID, j.Queue, j.Kind, j.Payload
	*j = o
	return nil
}
