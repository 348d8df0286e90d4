package dashboard

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
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
	prev, err := s.b.Retry(ctx, queue, id)
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
		st, err := s.b.Cancel(ctx, queue, id)
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
	res, err := s.b.ReleaseUnowned(ctx, queue, id)
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
		return queue, "", fmt.Sprintf("Nothing retried: %q is not a number of jobs (give a whole number, at least 1).", r.PostForm.Get("limit"))
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	sent, err := s.b.RetryDead(ctx, queue, n)
	if err != nil {
		return queue, "", fmt.Sprintf("Retried %d dead jobs, then: %v", sent, err)
	}
	return queue, "", fmt.Sprintf("Sent %d dead jobs back to run.", sent)
}

func (s *Server) pause(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue := r.PostForm.Get("queue")
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err := s.b.Pause(ctx, queue); err != nil {
		return queue, "", "Pause failed: " + err.Error()
	}
	return queue, "", "Queue " + queue + " is paused: no pool claims from it until it is resumed."
}

func (s *Server) resume(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue := r.PostForm.Get("queue")
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err := s.b.Resume(ctx, queue); err != nil {
		return queue, "", "Resume failed: " + err.Error()
	}
	return queue, "", "Queue " + queue + " is resumed."
}

func (s *Server) setLimits(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue := r.PostForm.Get("queue")
	l, err := parseLimits(r.PostForm.Get("max_running"), r.PostForm.Get("rate"), r.PostForm.Get("per"))
	if err != nil {
		return queue, "", "Limits unchanged: " + err.Error()
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err := s.b.SetLimits(ctx, queue, l); err != nil {
		return queue, "", "Limits unchanged: " + err.Error()
	}
	return queue, "", "Limits of " + queue + " set: " + l.String() + "."
}

func parseLimits(maxRunning, rate, per string) (broker.Limits, error) {
	var l broker.Limits
	var err error
	if maxRunning = strings.TrimSpace(maxRunning); maxRunning != "" {
		if l.MaxRunning, err = strconv.Atoi(maxRunning); err != nil || l.MaxRunning < 0 {
			return l, fmt.Errorf("max running %q is not a whole number (0 or empty: no limit)", maxRunning)
		}
	}
	if rate = strings.TrimSpace(rate); rate != "" {
		if l.Rate, err = strconv.Atoi(rate); err != nil || l.Rate < 0 {
			return l, fmt.Errorf("rate %q is not a whole number (0 or empty: no limit)", rate)
		}
	}
	if per = strings.TrimSpace(per); per != "" && l.Rate > 0 {
		if l.Per, err = time.ParseDuration(per); err != nil || l.Per < time.Millisecond {
			return l, fmt.Errorf("period %q is not a duration of at least 1ms; write it with a unit, like 1s or 1m", per)
		}
	}
	if l.Rate > 0 && l.Per == 0 {
		return l, errors.New("a rate needs its period, like 1s or 1m")
	}
	return l, nil
}
