// Package api serves fenceq's HTTP API for producers in any language: a
// versioned JSON API under /v1/ that enqueues jobs (one or a batch), reads
// a job's state and result, waits for it to finish (a bounded long poll),
// and cancels or retries it. Its OpenAPI 3 document is at
// /v1/openapi.json.
//
// A request body is a job in the job codec's JSON form (broker.Job's
// MarshalJSON and UnmarshalJSON): the same form as a line of `workerd
// enqueue --jsonl` and a row of the outbox. Enqueue is idempotent by job
// id, as broker.Client.Enqueue is: a request sent again with the same id
// answers the job the first one created (200, "created": false) instead
// of a second one (201).
//
// Every request but the OpenAPI document carries a bearer token
// (Authorization: Bearer TOKEN), compared in constant time. There is no
// tokenless mode, not even on loopback: any web page a browser opens can
// send a simple POST to a loopback port, so a loopback address is no
// boundary. Every refusal is a JSON body {"error": {"code", "message",
// "field"}} naming what was wrong and what to do. A 5xx never hides an
// accepted job: the API answers success only once Redis took the job, and
// a 503 whose outcome is unknown says so and names the id to send again.
//
// The package is exported so that a Go service that already runs a
// worker.Pool can serve the same API on its own mux (Mount) without
// running workerd. Single enqueues go through a broker.Batcher, so the
// jobs of concurrent requests share round trips (its one goroutine runs
// only while jobs are in flight); beyond that it holds no goroutines but
// the requests it serves. It never runs jobs: it imports neither worker
// nor any command.
package api
