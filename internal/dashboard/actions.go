package dashboard

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// The actions. Each answers the queue and job it acted on and a sentence
// for the user; act (auth.go) has checked the session and the CSRF token.

func (s *Server) retry(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue, id := r.PostForm.Get("queue"), r.PostForm.Get("id")
	ctx, cancel := reqCtx(r)
	defer cancel()
	prev, err := s.in.Retry(ctx, queue, id)
	if err != nil {
		return queue, id, "Retry failed: " + err.Error()
	}
	return queue, id, fmt.Sprintf("Job %s was %s and runs again.", id, prev)
}

// cancel cancels one job, or every job selected on a queue's page.
func (s *Server) cancel(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue, ids := r.PostForm.Get("queue"), r.PostForm["id"]
	switch {
	case len(ids) == 0:
		return queue, "", "Nothing cancelled: no job was selected."
	case len(ids) > broker.PageLimitMax:
		return queue, "", fmt.Sprintf("Nothing cancelled: %d jobs selected, at most %d at a time.", len(ids), broker.PageLimitMax)
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	var done, flagged int
	var errs []string
	for _, id := range ids {
		st, err := s.in.Cancel(ctx, queue, id)
		switch {
		case err != nil:
			errs = append(errs, err.Error())
		case st == broker.StateCancelled:
			done++
		case st == broker.StateRunning:
			flagged++
		}
	}
	msg := fmt.Sprintf("Cancelled %d of %d.", done, len(ids))
	if flagged > 0 {
		msg += fmt.Sprintf(" %d running: flagged, their workers stop them at the next heartbeat.", flagged)
	}
	if n := len(ids) - done - flagged - len(errs); n > 0 {
		msg += fmt.Sprintf(" %d had already finished and were left as they were.", n)
	}
	if len(errs) > 0 {
		msg += " Failed: " + strings.Join(errs[:min(len(errs), 3)], "; ")
	}
	return queue, strings.Join(ids[:min(len(ids), 5)], ","), msg
}

func (s *Server) release(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue, id := r.PostForm.Get("queue"), r.PostForm.Get("id")
	ctx, cancel := reqCtx(r)
	defer cancel()
	res, err := s.in.ReleaseUnowned(ctx, queue, id)
	if err != nil {
		return queue, id, "Release failed: " + err.Error()
	}
	if res.Previous != broker.StateRunning {
		return queue, id, fmt.Sprintf("Job %s was %s, not running: it keeps its state; its generation is now %d.", id, res.Previous, res.Generation)
	}
	return queue, id, fmt.Sprintf("Job %s released: it is %s under generation %d; its former holder's ack or renew is stale from now on.", id, res.State, res.Generation)
}

func (s *Server) retryDead(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue := r.PostForm.Get("queue")
	n, err := strconv.Atoi(cmp.Or(r.PostForm.Get("limit"), "1000"))
	if err != nil || n < 1 {
		return queue, "", fmt.Sprintf("Nothing retried: %q is not a number of jobs (give a whole number, at least 1).", cut(r.PostForm.Get("limit"), echoMax))
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	sent, err := s.in.RetryDead(ctx, queue, n)
	if err != nil {
		return queue, "", fmt.Sprintf("Retried %d dead jobs, then: %v", sent, err)
	}
	return queue, "", fmt.Sprintf("Sent %d dead jobs back to run.", sent)
}

func (s *Server) pause(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue := r.PostForm.Get("queue")
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err := s.in.Pause(ctx, queue); err != nil {
		return queue, "", "Pause failed: " + err.Error()
	}
	return queue, "", "Queue " + queue + " is paused: no pool claims from it until it is resumed."
}

func (s *Server) resume(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue := r.PostForm.Get("queue")
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err := s.in.Resume(ctx, queue); err != nil {
		return queue, "", "Resume failed: " + err.Error()
	}
	return queue, "", "Queue " + queue + " is resumed."
}

// setLimits changes the limits whose fields the user changed and keeps the
// others, as `workerd limit` does: a field counts as entered when it is not
// empty and differs from the value the form showed (its shown_ twin). 0
// removes a limit. The change is one step inside Redis
// (broker.ChangeLimits): a limit another operator changes meanwhile is
// kept unless this form changed it too, and a refused change writes
// nothing. The message says what they were before and are now.
func (s *Server) setLimits(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue := r.PostForm.Get("queue")
	ch, err := parseLimits(r.PostForm)
	if err != nil {
		return queue, "", "Limits unchanged: " + err.Error()
	}
	if !ch.MaxRunning && !ch.Rate && !ch.Per {
		return queue, "", "Limits of " + queue + " unchanged: no field was changed (an empty field keeps its limit; 0 removes one)."
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	were, err := s.in.Limits(ctx, queue) // only to say what they were
	if err != nil {
		return queue, "", "Limits unchanged: " + err.Error()
	}
	now, err := s.in.ChangeLimits(ctx, queue, ch)
	var ve *broker.ValidationError
	switch {
	case errors.As(err, &ve) && ve.Field == "period":
		return queue, "", "Limits unchanged: a period needs a rate, and the queue has none: enter both, like 100 per 1m."
	case errors.As(err, &ve) && ve.Field == "rate":
		return queue, "", "Limits unchanged: a rate needs its period, like 1s or 1m."
	case err != nil:
		return queue, "", "Limits unchanged: " + err.Error()
	}
	return queue, "", "Limits of " + queue + " set: " + now.String() + " (were: " + were.String() + ")."
}

// parseLimits reads which limits a limits form changes, and to what.
func parseLimits(f url.Values) (broker.LimitsChange, error) {
	var ch broker.LimitsChange
	entered := func(name string) (string, bool) {
		v := strings.TrimSpace(f.Get(name))
		return v, v != "" && v != strings.TrimSpace(f.Get("shown_"+name))
	}
	var err error
	if v, ok := entered("max_running"); ok {
		ch.MaxRunning = true
		if ch.To.MaxRunning, err = strconv.Atoi(v); err != nil || ch.To.MaxRunning < 0 {
			return ch, fmt.Errorf("max running %q is not a whole number (0 removes the limit; leave it empty to keep it)", cut(v, echoMax))
		}
	}
	if v, ok := entered("rate"); ok {
		ch.Rate = true
		if ch.To.Rate, err = strconv.Atoi(v); err != nil || ch.To.Rate < 0 {
			return ch, fmt.Errorf("rate %q is not a whole number (0 removes the limit; leave it empty to keep it)", cut(v, echoMax))
		}
	}
	if v, ok := entered("per"); ok {
		ch.Per = true
		if ch.To.Per, err = time.ParseDuration(v); err != nil || ch.To.Per < time.Millisecond {
			return ch, fmt.Errorf("period %q is not a duration of at least 1ms; write it with a unit, like 1s or 1m", cut(v, echoMax))
		}
	}
	return ch, nil
}
