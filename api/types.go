package api

import (
	"encoding/base64"
	"encoding/json"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// The request bodies are a job's JSON form (broker.Job) and batchRequest;
// the answers are the types below. The OpenAPI document describes each of
// them field by field (TestOpenAPIMatchesTypes). They are unexported:
// the document is the contract a client reads, and a Go program enqueues
// through broker.Client, not through this API.

// enqueued answers POST /v1/queues/{queue}/jobs: 201 with Created when
// the request stored the job, 200 without when a job with its id was
// there already (a re-sent request, or another one under the same id).
type enqueued struct {
	ID      string `json:"id"`
	Queue   string `json:"queue"`
	Created bool   `json:"created"`
	// State is the existing job's state when Created is false.
	State string `json:"state,omitempty"`
}

// batchRequest is the body of POST /v1/queues/{queue}/jobs/batch.
type batchRequest struct {
	Jobs []json.RawMessage `json:"jobs"` // each a job's JSON form
}

// batchResponse answers a batch, one item per job in the order sent.
// Its status is 200 when every job was judged (each item says how), and
// 503 when Redis failed for one or more of them (Error says so; the items
// say which jobs were stored).
type batchResponse struct {
	Jobs    []batchItem `json:"jobs"`
	Created int         `json:"created"` // items of status 201
	Error   *apiError   `json:"error,omitempty"`
}

// batchItem is one job's answer in a batch: Status is the status the
// single enqueue would have answered (201, 200, 400, 409, 503...), with
// Error when it is 400 or more.
type batchItem struct {
	Status  int       `json:"status"`
	ID      string    `json:"id,omitempty"`
	Created bool      `json:"created"`
	State   string    `json:"state,omitempty"`
	Error   *apiError `json:"error,omitempty"`
}

// jobJSON answers GET /v1/queues/{queue}/jobs/{id}, its wait, cancel and
// retry: the job as stored. Payload, Result and Progress are JSON when
// what was stored is JSON; anything else is in the _base64 field beside.
type jobJSON struct {
	Queue string `json:"queue"`
	ID    string `json:"id"`
	Kind  string `json:"kind"`
	State string `json:"state"`
	// Final: the state is done, dead or cancelled, and will not change
	// unless someone retries the job.
	Final           bool              `json:"final"`
	Group           string            `json:"group,omitempty"`
	Attempt         int               `json:"attempt"`
	MaxAttempts     int               `json:"max_attempts"`
	Priority        int               `json:"priority"`
	Generation      int64             `json:"generation"`
	Payload         json.RawMessage   `json:"payload,omitempty"`
	PayloadBase64   string            `json:"payload_base64,omitempty"`
	Result          json.RawMessage   `json:"result,omitempty"`
	ResultBase64    string            `json:"result_base64,omitempty"`
	Progress        json.RawMessage   `json:"progress,omitempty"`
	ProgressBase64  string            `json:"progress_base64,omitempty"`
	LastError       string            `json:"last_error,omitempty"`
	Errors          []attemptJSON     `json:"errors,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	CancelRequested bool              `json:"cancel_requested"`
	CreatedAt       *time.Time        `json:"created_at,omitempty"`
	RunAt           *time.Time        `json:"run_at,omitempty"`
	ClaimedAt       *time.Time        `json:"claimed_at,omitempty"`
	FinishedAt      *time.Time        `json:"finished_at,omitempty"`
	LeaseUntil      *time.Time        `json:"lease_until,omitempty"`
}

// attemptJSON is one failed attempt of a job.
type attemptJSON struct {
	Attempt int       `json:"attempt"`
	At      time.Time `json:"at"`
	Error   string    `json:"error"`
}

// changed answers cancel and retry: the job after the action, and its
// state before it when the broker says (retry does).
type changed struct {
	Job           jobJSON `json:"job"`
	PreviousState string  `json:"previous_state,omitempty"`
}

// jobView is j as the API shows it.
func jobView(j broker.JobInfo) jobJSON {
	v := jobJSON{
		Queue: j.Queue, ID: j.ID, Kind: j.Kind, State: string(j.State), Final: j.State.Final(), Group: j.Group,
		Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, Priority: j.Priority, Generation: j.Generation,
		LastError: j.LastError, Metadata: j.Metadata, CancelRequested: j.CancelRequested,
		CreatedAt: utc(j.CreatedAt), RunAt: utc(j.RunAt), ClaimedAt: utc(j.ClaimedAt),
		FinishedAt: utc(j.FinishedAt), LeaseUntil: utc(j.LeaseUntil),
	}
	v.Payload, v.PayloadBase64 = bytesView(j.Payload)
	v.Result, v.ResultBase64 = bytesView(j.Result)
	v.Progress, v.ProgressBase64 = bytesView(j.Progress)
	for _, e := range j.Errors {
		v.Errors = append(v.Errors, attemptJSON{Attempt: e.Attempt, At: e.At.UTC(), Error: e.Error})
	}
	return v
}

// bytesView is b as JSON when it is JSON, else as base64.
func bytesView(b []byte) (json.RawMessage, string) {
	switch {
	case len(b) == 0:
		return nil, ""
	case json.Valid(b):
		return json.RawMessage(b), ""
	}
	return nil, base64.StdEncoding.EncodeToString(b)
}

func utc(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}
