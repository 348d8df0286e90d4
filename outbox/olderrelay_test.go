package outbox

import (
	"bytes"
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/fenceq/fenceq/broker"
)

// olderJobForm is broker.Job's JSON form as a relay from before job
// metadata reads it: strictly, every other key refused
// (DisallowUnknownFields, as broker.Job.UnmarshalJSON has always done).
type olderJobForm struct {
	Queue                string          `json:"queue,omitempty"`
	Kind                 string          `json:"kind,omitempty"`
	Payload              json.RawMessage `json:"payload,omitempty"`
	ID                   string          `json:"id,omitempty"`
	DelayMS              int64           `json:"delay_ms,omitempty"`
	RunAtMS              int64           `json:"run_at_ms,omitempty"`
	MaxAttempts          int             `json:"max_attempts,omitempty"`
	Priority             int             `json:"priority,omitempty"`
	UniqueKey            string          `json:"unique_key,omitempty"`
	UniqueForMS          int64           `json:"unique_for_ms,omitempty"`
	DependsOn            []string        `json:"depends_on,omitempty"`
	RunIfDependencyFails bool            `json:"run_if_dependency_fails,omitempty"`
	Delay                string          `json:"delay,omitempty"`
	At                   *string         `json:"at,omitempty"`
	UniqueFor            string          `json:"unique_for,omitempty"`
}

// insertRecorder is a database/sql driver that keeps the arguments of
// each statement it is given and answers every one with success.
type insertRecorder struct {
	mu   sync.Mutex
	args [][]driver.Value
}

func (d *insertRecorder) Open(string) (driver.Conn, error) { return recorderConn{d}, nil }

type recorderConn struct{ d *insertRecorder }

func (c recorderConn) Prepare(string) (driver.Stmt, error) { return recorderStmt(c), nil }
func (recorderConn) Close() error                          { return nil }
func (recorderConn) Begin() (driver.Tx, error)             { return recorderTx{}, nil }

type recorderTx struct{}

func (recorderTx) Commit() error   { return nil }
func (recorderTx) Rollback() error { return nil }

type recorderStmt struct{ d *insertRecorder }

func (recorderStmt) Close() error  { return nil }
func (recorderStmt) NumInput() int { return -1 }
func (s recorderStmt) Exec(args []driver.Value) (driver.Result, error) {
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	s.d.args = append(s.d.args, args)
	return driver.RowsAffected(1), nil
}
func (recorderStmt) Query([]driver.Value) (driver.Rows, error) {
	return nil, errors.New("insertRecorder answers no queries")
}

var registerRecorder sync.Once
var recorder = &insertRecorder{}

// The options column promises that "an older relay reads rows written by
// this one": during a rolling upgrade, producers on this version write
// rows that relays of the last version still move. A producer that uses
// nothing new — no Job.Metadata, no TracerProvider on its broker — but
// runs in a traced request (an HTTP middleware's span in ctx) now writes
// a "metadata" key into every row, which the older relay's strict decoder
// refuses, moving the row to the refused table instead of Redis.
func TestOptionsReadByAnOlderRelayUnderASpan(t *testing.T) {
	registerRecorder.Do(func() { sql.Register("fenceq-outbox-recorder", recorder) })
	db, err := sql.Open("fenceq-outbox-recorder", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer c.Close()
	b, err := broker.New(c, broker.Options{}) // this broker does not trace
	if err != nil {
		t.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	ctx, span := tp.Tracer("app").Start(context.Background(), "POST /signup")
	defer span.End()

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Enqueue(ctx, tx, b.Client(), "", broker.Job{Queue: "mail", Kind: "welcome", Payload: []byte(`{}`), MaxAttempts: 3}); err != nil {
		t.Fatalf("Enqueue: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	recorder.mu.Lock()
	row := recorder.args[len(recorder.args)-1]
	recorder.mu.Unlock()
	opts, _ := row[4].([]byte)
	if s, ok := row[4].(string); ok {
		opts = []byte(s)
	}
	dec := json.NewDecoder(bytes.NewReader(opts))
	dec.DisallowUnknownFields()
	var w olderJobForm
	if err := dec.Decode(&w); err != nil {
		t.Fatalf("a relay of the last version cannot read the options %s of a row written with no new option: %v", opts, err)
	}
}
