package api

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// enqueue serves POST /v1/queues/{queue}/jobs: one job, through the
// Batcher: a lone request is sent at once, concurrent ones share round
// trips (1.8× the jobs/s from 50 clients, docs/benchmarks.md).
func (s *Server) enqueue(w http.ResponseWriter, r *http.Request) {
	queue := r.PathValue("queue")
	body, ok := s.body(w, r)
	if !ok {
		return
	}
	var j broker.Job
	if err := j.UnmarshalJSON(body); err != nil {
		s.fail(w, r, err, "")
		return
	}
	if e := inQueue(&j, queue); e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	id, err := s.batcher.Enqueue(ctx, j)
	var de *broker.DuplicateError
	switch {
	case err == nil:
		w.Header().Set("Location", jobPath(queue, id))
		writeJSON(w, http.StatusCreated, enqueued{ID: id, Queue: queue, Created: true})
	case errors.As(err, &de):
		writeJSON(w, http.StatusOK, enqueued{ID: de.ID, Queue: queue, State: string(de.State)})
	default:
		s.fail(w, r, err, cmp.Or(id, j.ID))
	}
}

// enqueueBatch serves POST /v1/queues/{queue}/jobs/batch: up to maxBatch
// jobs in one pipeline, each judged on its own.
func (s *Server) enqueueBatch(w http.ResponseWriter, r *http.Request) {
	queue := r.PathValue("queue")
	body, ok := s.body(w, r)
	if !ok {
		return
	}
	var req batchRequest
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, apiError{Code: CodeInvalid, Field: "body",
			Message: fmt.Sprintf("the body is not a batch (%v); send {\"jobs\": [job, ...]}, each job in the form POST /v1/queues/{queue}/jobs takes", err)})
		return
	}
	if _, err := dec.Token(); err != io.EOF {
		writeError(w, http.StatusBadRequest, apiError{Code: CodeInvalid, Field: "body", Message: "more follows the batch's JSON object; send one object {\"jobs\": [...]}"})
		return
	}
	if jobsTwice(body) {
		// encoding/json would take the last list, and a gateway or a log
		// that read the first would see other jobs than those enqueued.
		writeError(w, http.StatusBadRequest, apiError{Code: CodeInvalid, Field: "jobs", Message: "the body gives \"jobs\" more than once (keys match without regard to case); send one object {\"jobs\": [...]} with every job in that one list"})
		return
	}
	switch n := len(req.Jobs); {
	case n == 0:
		writeError(w, http.StatusBadRequest, apiError{Code: CodeInvalid, Field: "jobs", Message: "no jobs: send {\"jobs\": [job, ...]} with at least one job"})
		return
	case n > s.maxBatch:
		writeError(w, http.StatusRequestEntityTooLarge, apiError{Code: CodeTooLarge, Field: "jobs",
			Message: fmt.Sprintf("%d jobs in one batch; at most %d are allowed: split them into batches of %d or fewer", n, s.maxBatch, s.maxBatch)})
		return
	}
	items := make([]batchItem, len(req.Jobs))
	jobs := make([]broker.Job, 0, len(req.Jobs))
	at := make([]int, 0, len(req.Jobs)) // each job's index in items
	for i, raw := range req.Jobs {
		var j broker.Job
		if err := j.UnmarshalJSON(raw); err != nil {
			_, e := classify(err, "")
			items[i] = batchItem{Status: http.StatusBadRequest, Error: &e}
			continue
		}
		if e := inQueue(&j, queue); e != nil {
			items[i] = batchItem{Status: http.StatusBadRequest, ID: j.ID, Error: e}
			continue
		}
		jobs = append(jobs, j)
		at = append(at, i)
	}
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	var res []broker.Enqueued
	if len(jobs) > 0 {
		res = s.b.Client().EnqueueMany(ctx, jobs)
	}
	out := batchResponse{Jobs: items}
	failed := 0
	for k, e := range res {
		it := itemOf(jobs[k], e)
		items[at[k]] = it
		switch {
		case it.Status == http.StatusCreated:
			out.Created++
		case it.Status >= 500:
			failed++
		}
	}
	if failed == 0 {
		writeJSON(w, http.StatusOK, out)
		return
	}
	s.log.Warn("api: Redis failed for some jobs of a batch", slog.String("queue", queue), slog.Int("jobs", len(items)),
		slog.Int("failed", failed), slog.Int("created", out.Created))
	out.Error = &apiError{Code: CodeUnavailable, Field: "jobs",
		Message: fmt.Sprintf("Redis failed for %d of the %d jobs; each item says whether its job was stored: send the failed ones again, with the ids their items name, and none is enqueued twice", failed, len(items))}
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, out)
}

// itemOf is one job's answer in a batch, as enqueue answers it alone.
func itemOf(j broker.Job, e broker.Enqueued) batchItem {
	var de *broker.DuplicateError
	switch {
	case e.Err == nil:
		return batchItem{Status: http.StatusCreated, ID: e.ID, Created: true}
	case errors.As(e.Err, &de):
		return batchItem{Status: http.StatusOK, ID: de.ID, State: string(de.State)}
	}
	id := e.ID
	if e.Existing { // e.ID is the unique key's holder, named in the error
		id = j.ID
	}
	status, ae := classify(e.Err, id)
	return batchItem{Status: status, ID: id, Error: &ae}
}

// job serves GET /v1/queues/{queue}/jobs/{id}.
func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	j, err := s.b.Inspector().Job(ctx, queue, id)
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	writeJSON(w, http.StatusOK, jobView(j))
}

// wait serves GET /v1/queues/{queue}/jobs/{id}/wait?timeout=30s: it
// answers the job once it is done, dead or cancelled, or as it stands
// when the timeout ends first ("final": false): then wait again.
func (s *Server) wait(w http.ResponseWriter, r *http.Request) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	timeout, e := s.waitTimeout(r.URL.Query())
	if e != nil {
		writeError(w, http.StatusBadRequest, *e)
		return
	}
	if timeout == 0 {
		s.job(w, r)
		return
	}
	// The server's write timeout is for short answers; this one may take
	// the whole timeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(timeout + 10*time.Second))
	ctx, cancel := context.WithTimeout(r.Context(), timeout)
	defer cancel()
	var j broker.JobInfo
	var err error
	select {
	case s.blocking <- struct{}{}:
		j, err = s.b.Client().Wait(ctx, queue, id)
		<-s.blocking
	default:
		j, err = s.poll(ctx, queue, id)
	}
	switch {
	case err == nil:
		writeJSON(w, http.StatusOK, jobView(j))
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		s.job(w, r) // the timeout ended: the job as it stands
	default:
		s.fail(w, r, err, "")
	}
}

// poll is Wait for a wait beyond MaxBlockingWaits: it reads the job every
// waitPollInterval until it is final, holding no connection in between.
func (s *Server) poll(ctx context.Context, queue, id string) (broker.JobInfo, error) {
	t := time.NewTicker(waitPollInterval)
	defer t.Stop()
	for {
		j, err := s.b.Inspector().Job(ctx, queue, id)
		if err != nil || j.State.Final() {
			return j, err
		}
		select {
		case <-ctx.Done():
			return broker.JobInfo{}, ctx.Err()
		case <-t.C:
		}
	}
}

// waitTimeout reads the wait's timeout parameter: a duration with a unit
// ("30s") or a number of seconds, from 0 to maxWait.
func (s *Server) waitTimeout(q url.Values) (time.Duration, *apiError) {
	raw := q.Get("timeout")
	if raw == "" {
		return min(WaitDefault, s.maxWait), nil
	}
	d, err := time.ParseDuration(raw)
	if err != nil {
		secs, ferr := strconv.ParseFloat(raw, 64)
		if ferr != nil || secs != secs { // NaN
			return 0, &apiError{Code: CodeInvalid, Field: "timeout",
				Message: fmt.Sprintf("timeout %q is not a duration: write it with a unit (30s, 1m) or as seconds (30)", raw)}
		}
		d = time.Duration(max(min(secs, 1e9), -1e9) * float64(time.Second))
	}
	switch {
	case d < 0:
		return 0, &apiError{Code: CodeInvalid, Field: "timeout", Message: fmt.Sprintf("timeout %q is negative; give 0 (answer at once) up to %v", raw, s.maxWait)}
	case d > s.maxWait:
		return 0, &apiError{Code: CodeInvalid, Field: "timeout",
			Message: fmt.Sprintf("timeout %q is over the most a wait may block, %v: give at most that, and wait again while the answer says \"final\": false", raw, s.maxWait)}
	}
	return d, nil
}

// cancel serves POST /v1/queues/{queue}/jobs/{id}/cancel.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	st, err := s.b.Inspector().Cancel(ctx, queue, id)
	if err != nil {
		s.fail(w, r, err, "")
		return
	}
	s.answerChanged(ctx, w, r, queue, id, st, "")
}

// retry serves POST /v1/queues/{queue}/jobs/{id}/retry.
func (s *Server) retry(w http.ResponseWriter, r *http.Request) {
	queue, id := r.PathValue("queue"), r.PathValue("id")
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	prev, err := s.b.Inspector().Retry(ctx, queue, id)
	switch {
	case err != nil && prev != "":
		// Retry names the previous state only with a refusal of the job
		// itself: not dead or cancelled, or unable to go back.
		writeError(w, http.StatusConflict, apiError{Code: CodeConflict, Field: "id",
			Message: strings.TrimPrefix(err.Error(), "fenceq: ")})
		return
	case err != nil:
		s.fail(w, r, err, "")
		return
	}
	s.answerChanged(ctx, w, r, queue, id, "", prev)
}

// answerChanged answers a cancel or retry with the job read after it. A job
// trimmed meanwhile answers what the action said of it.
func (s *Server) answerChanged(ctx context.Context, w http.ResponseWriter, r *http.Request, queue, id string, st, prev broker.State) {
	j, err := s.b.Inspector().Job(ctx, queue, id)
	switch {
	case errors.Is(err, broker.ErrJobNotFound) && st != "":
		writeJSON(w, http.StatusOK, changed{Job: jobJSON{Queue: queue, ID: id, State: string(st), Final: st.Final()}})
	case err != nil:
		s.fail(w, r, err, "")
	default:
		writeJSON(w, http.StatusOK, changed{Job: jobView(j), PreviousState: string(prev)})
	}
}

// body reads a request's body, at most maxBody bytes; it answers false
// when it refused the request.
func (s *Server) body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		writeError(w, http.StatusRequestEntityTooLarge, apiError{Code: CodeTooLarge, Field: "body",
			Message: fmt.Sprintf("the body is over %d bytes, the most a request may send: send fewer jobs per batch, or store large data elsewhere and enqueue a reference to it", s.maxBody)})
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, apiError{Code: CodeInvalid, Field: "body", Message: fmt.Sprintf("could not read the body: %v", err)})
		return nil, false
	case len(bytes.TrimSpace(data)) == 0:
		writeError(w, http.StatusBadRequest, apiError{Code: CodeInvalid, Field: "body",
			Message: `the body is empty: send a JSON object, e.g. {"kind": "send", "payload": {"to": "ada"}}`})
		return nil, false
	}
	return data, true
}

// inQueue puts the path's queue into j; a different queue in the body is
// an error.
func inQueue(j *broker.Job, queue string) *apiError {
	if j.Queue != "" && j.Queue != queue {
		return &apiError{Code: CodeInvalid, Field: "queue",
			Message: fmt.Sprintf("the job names queue %q but the path names %q: leave queue out of the body, or make the two the same", j.Queue, queue)}
	}
	j.Queue = queue
	return nil
}

// jobPath is the path of a job's resource.
func jobPath(queue, id string) string {
	return "/v1/queues/" + segment(queue) + "/jobs/" + segment(id)
}

// segment is s escaped as one segment of a path. A segment "." or ".."
// is escaped too: sent as it is, a client or a proxy resolves it away
// (/v1/queues/../jobs/x is /v1/jobs/x).
func segment(s string) string {
	if s == "." || s == ".." {
		return strings.Repeat("%2E", len(s))
	}
	return url.PathEscape(s)
}

// jobsTwice says whether body, a batch that decoded, gives its key "jobs"
// more than once, in any case.
func jobsTwice(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return false
	}
	n := 0
	for dec.More() {
		t, err := dec.Token()
		if k, ok := t.(string); err != nil || !ok {
			return false
		} else if strings.EqualFold(k, "jobs") {
			n++
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return false
		}
	}
	return n > 1
}
