package dashboard

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"github.com/fenceq/fenceq/broker"
)

// live answers the figures a page shows that change by themselves, as
// JSON: {"values": {key: text}}. A page's script polls it and writes each
// text into the elements whose data-live attribute is that key, so the
// page updates without a reload. ?queue=Q answers one queue's figures
// (all queues' without it); with &job=ID, that job's instead.
func (s *Server) live(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	in := r.URL.Query()
	queue, id := in.Get("queue"), in.Get("job")
	values := map[string]string{}
	fail := func(status int, err error) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
	}
	if queue != "" || id != "" {
		switch ok, err := s.queueExists(ctx, queue); {
		case err != nil:
			fail(http.StatusBadGateway, err)
			return
		case !ok && queue == "":
			fail(http.StatusNotFound, errors.New("no queue named: a job's live figures need ?queue=NAME&job=ID"))
			return
		case !ok:
			fail(http.StatusNotFound, errors.New(s.unknownQueueText(queue)))
			return
		}
	}
	switch {
	case id != "":
		jv, err := s.readJob(ctx, queue, id, false) // no payload: the poll shows none
		var ve *broker.ValidationError
		switch {
		case errors.As(err, &ve):
			fail(http.StatusBadRequest, err)
			return
		case errors.Is(err, broker.ErrJobNotFound):
			fail(http.StatusNotFound, err)
			return
		case err != nil:
			fail(http.StatusBadGateway, err)
			return
		}
		// Each value is written as the page writes it (job.html), so a
		// refresh changes only what changed.
		j := jv.Job
		values[jv.Key("state")] = string(j.State)
		values[jv.Key("attempt")] = strconv.Itoa(j.Attempt)
		values[jv.Key("generation")] = strconv.FormatInt(j.Generation, 10) // a fencing token, copied as is
		values[jv.Key("lease")] = jv.LeaseText()
		values[jv.Key("finished")] = when(j.FinishedAt)
		values[jv.Key("error")] = lastError(j.LastError) // as the page's box shows it
		values[jv.Key("renewals")] = strconv.Itoa(j.Renewals)
	default:
		names := []string{queue}
		if queue == "" {
			var err error
			if names, err = s.in.Queues(ctx); err != nil {
				fail(http.StatusBadGateway, err)
				return
			}
		}
		for _, name := range names {
			q, err := s.summarize(ctx, name)
			if ve := (*broker.ValidationError)(nil); errors.As(err, &ve) {
				fail(http.StatusBadRequest, err)
				return
			} else if err != nil {
				fail(http.StatusBadGateway, err)
				return
			}
			for st, n := range q.counts() {
				values[q.Key(string(st))] = count(n)
			}
			values[q.Key("head")] = q.HeadText()
			values[q.Key("expired")] = q.ExpiredText()
			values[q.Key("paused")] = q.PausedText()
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(map[string]any{"values": values})
}

// liveURL is the live-update URL of a queue's figures, or of one job's.
func liveURL(queue, id string) string {
	v := url.Values{"queue": {queue}}
	if id != "" {
		v.Set("job", id)
	}
	return Mount + "live?" + v.Encode()
}

func (q queueSummary) counts() map[broker.State]int64 {
	o := q.O
	return map[broker.State]int64{
		broker.StateBlocked: o.Blocked, broker.StateScheduled: o.Scheduled, broker.StatePending: o.Pending,
		broker.StateRunning: o.Running, broker.StateDone: o.Done, broker.StateDead: o.Dead, broker.StateCancelled: o.Cancelled,
	}
}

// ExpiredText is the expired-lease figure of the queue.
func (q queueSummary) ExpiredText() string {
	if q.More {
		return "over " + count(expiredShown)
	}
	return count(int64(q.Expired))
}

// HeadText is how long the next job to be claimed has waited.
func (q queueSummary) HeadText() string {
	if q.O.Pending == 0 {
		return "nothing pending"
	}
	return age(q.O.HeadAge)
}

// PausedText is the queue's claiming status.
func (q queueSummary) PausedText() string {
	if q.O.Paused {
		return "paused"
	}
	return "claiming"
}

// Count is one state's figure, for the templates.
func (q queueSummary) Count(st string) string { return count(q.counts()[broker.State(st)]) }
