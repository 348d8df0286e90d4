package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// The codes of an error body's "code". A client branches on the code and the status,
// never on the message.
const (
	CodeInvalid          = "invalid"            // 400: a field, a parameter or the JSON is wrong
	CodeUnauthorized     = "unauthorized"       // 401: no bearer token, or not the right one
	CodeNotFound         = "not_found"          // 404: no such job in the queue
	CodeNoRoute          = "no_route"           // 404: no such path
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeUniqueHeld       = "unique_held"        // 409: the unique key is held by the job HolderID
	CodeConflict         = "conflict"           // 409: the job's state does not allow the action
	CodeTooLarge         = "too_large"          // 413: the body or the batch is over its limit
	CodeUnavailable      = "unavailable"        // 503: Redis did not answer; send the same request again
	CodeNotReplicated    = "not_replicated"     // 503: stored on the primary, not acknowledged by replicas in time
	CodeCorrupt          = "corrupt_job"        // 500: the job's hash cannot be read
	CodeInternal         = "internal"           // 500
)

// errorResponse is the body of every refusal.
type errorResponse struct {
	Error apiError `json:"error"`
}

// apiError is what was wrong: a code, a message saying what to do, and the
// field at fault when there is one.
type apiError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the field of the job (its JSON name), the query
	// parameter, the header or the path segment at fault; "body" for the
	// body as a whole.
	Field string `json:"field,omitempty"`
	// HolderID is the job holding the unique key, with CodeUniqueHeld.
	HolderID string `json:"holder_id,omitempty"`
	// ID is the job's id when the outcome is unknown (CodeUnavailable) or
	// the job was stored but not replicated (CodeNotReplicated): send
	// the same request again with this id to learn what was stored.
	ID string `json:"id,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, status int, e apiError) {
	if status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	writeJSON(w, status, errorResponse{Error: e})
}

// fail answers err, from the broker, with its status; id is the job's id
// when the request named or made one.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error, id string) {
	if q := r.PathValue("queue"); errors.Is(err, broker.ErrJobNotFound) && q != "" {
		// Say which is unknown: one SISMEMBER, on this path only.
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		known, qerr := s.b.Inspector().QueueExists(ctx, q)
		cancel()
		if qerr == nil && !known {
			writeError(w, http.StatusNotFound, apiError{Code: CodeNotFound, Field: "queue",
				Message: fmt.Sprintf("no queue %q: no job was ever enqueued to it under this key prefix; check the queue's name (and workerd's --prefix)", q)})
			return
		}
	}
	status, e := classify(err, id)
	if status >= 500 && r.Context().Err() == nil { // not for a client that left
		s.log.Warn("api: answered "+http.StatusText(status), slog.String("method", r.Method), slog.String("path", r.URL.Path),
			slog.Int("status", status), slog.Any("err", err))
	}
	writeError(w, status, e)
}

// classify maps a broker error to a status and an Error.
func classify(err error, id string) (int, apiError) {
	var ve *broker.ValidationError
	var uh *broker.UniqueHeldError
	var ce *broker.CorruptJobError
	switch {
	case errors.As(err, &ve):
		return http.StatusBadRequest, apiError{Code: CodeInvalid, Field: jsonField(ve.Field), Message: strings.TrimPrefix(ve.Error(), "fenceq: ")}
	case errors.As(err, &uh):
		return http.StatusConflict, apiError{Code: CodeUniqueHeld, Field: "unique_key", HolderID: uh.HolderID,
			Message: fmt.Sprintf("unique key %q in queue %q is held by job %q (%s): nothing was enqueued; read that job, or wait until it finishes or its unique_for ends",
				uh.Key, uh.Queue, uh.HolderID, cmpState(uh.HolderState))}
	case errors.Is(err, broker.ErrJobNotFound):
		return http.StatusNotFound, apiError{Code: CodeNotFound, Field: "id", Message: strings.TrimPrefix(err.Error(), "fenceq: ") +
			": it was never enqueued in this queue, or it finished and retention deleted it"}
	case errors.As(err, &ce):
		return http.StatusInternalServerError, apiError{Code: CodeCorrupt, Field: "id", Message: strings.TrimPrefix(ce.Error(), "fenceq: ") + "; run `workerd check` on the queue"}
	case errors.Is(err, broker.ErrNotReplicated):
		return http.StatusServiceUnavailable, apiError{Code: CodeNotReplicated, ID: id,
			Message: strings.TrimPrefix(err.Error(), "fenceq: ") + "; send the same request again with this id: it answers the stored job"}
	case errors.Is(err, broker.ErrOutcomeUnknown):
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, ID: id,
			Message: "Redis did not answer, and the request may have been applied: send the same request again (with the job's id) to learn what it did (" + err.Error() + ")"}
	case broker.IsTransient(err), errors.Is(err, context.Canceled):
		return http.StatusServiceUnavailable, apiError{Code: CodeUnavailable, ID: id,
			Message: "Redis is unreachable or busy: send the same request again in a moment; with the job's id it cannot enqueue twice (" + err.Error() + ")"}
	}
	return http.StatusInternalServerError, apiError{Code: CodeInternal, ID: id, Message: err.Error()}
}

func cmpState(s broker.State) string {
	if s == "" {
		return "trimmed, its unique_for still running"
	}
	return string(s)
}

// jsonField is the JSON name of a field the broker names in words
// ("unique key", "depends on").
func jsonField(f string) string {
	return strings.ReplaceAll(f, " ", "_")
}
