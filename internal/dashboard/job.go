package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/fenceq/fenceq/broker"
)

const (
	// linksShown bounds the dependencies and dependents a job's page lists.
	linksShown = 100
	// eventsSearched is how many of a queue's latest events a job's page
	// looks through for the job's own.
	eventsSearched = 1000
)

// leaseView is a running job's lease on its page.
type leaseView struct {
	Generation int64
	Deadline   time.Time
	Left       time.Duration // on the Redis clock; negative once expired
	Expired    bool
	Now        time.Time // the Redis clock when it was read
}

// jobView is a job's page.
type jobView struct {
	Job            broker.JobInfo
	Payload        shown
	Result         shown
	Progress       shown
	Lease          *leaseView
	Holder         *holderView // the pool that holds Lease; nil when none is listed
	HolderErr      string      // why the holder is not shown: the registry could not be read
	Links          broker.JobLinks
	EventsOn       bool
	Events         []broker.Event
	Retryable      bool
	Cancelable     bool
	Deletable      bool // no worker holds it
	Promotable     bool // scheduled: it can run now
	Here           string
	EventsSearched int
}

// ErrorCut says whether the last error is longer than its box shows.
func (jv jobView) ErrorCut() bool { return len(jv.Job.LastError) > errorShown }

// Key names a figure of the job for the live updates (live.go).
func (jobView) Key(field string) string { return "job|" + field }

func (s *Server) job(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Query().Get("view") {
	case "release":
		s.confirmRelease(w, r)
		return
	case "delete":
		s.confirmDelete(w, r)
		return
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	queue, id, jv, ok := s.requestedJob(ctx, w, r, true)
	if !ok {
		return
	}
	var err error
	if jv.Lease != nil {
		ws, err := s.in.Workers(ctx)
		if err != nil {
			jv.HolderErr = "the worker registry could not be read: " + err.Error()
		} else {
			jv.Holder = holderOf(ws, queue, id, jv.Lease.Generation, jv.Lease.Now)
		}
	}
	if jv.Links, err = s.in.JobLinks(ctx, queue, id, linksShown); err != nil {
		s.failErr(w, r, "read the dependencies of job "+id, err)
		return
	}
	kept, err := s.in.EventsKept(ctx, queue)
	if err != nil {
		s.failErr(w, r, "read the event settings of "+queue, err)
		return
	}
	if jv.EventsOn = kept > 0; jv.EventsOn {
		evs, err := s.in.RecentEvents(ctx, queue, eventsSearched)
		if err != nil {
			s.failErr(w, r, "read the events of "+queue, err)
			return
		}
		for _, e := range evs {
			if e.JobID == id {
				jv.Events = append(jv.Events, e)
			}
		}
		jv.EventsSearched = len(evs)
	}
	jv.Payload, jv.Result, jv.Progress = show(jv.Job.Payload), show(jv.Job.Result), show(jv.Job.Progress)
	jv.Retryable = jv.Job.State == broker.StateDead || jv.Job.State == broker.StateCancelled
	jv.Cancelable = !jv.Job.State.Final() && !jv.Job.CancelRequested
	jv.Deletable = jv.Job.State != broker.StateRunning
	jv.Promotable = jv.Job.State == broker.StateScheduled
	jv.Here = jobURL(queue, id)
	s.render(w, r, http.StatusOK, "job", page{Title: "Job " + id, Queue: queue, Live: liveURL(queue, id), Data: jv})
}

// readJob reads a job and, while it runs, its lease on the Redis clock:
// the whole job, or (whole false) what a listing shows of it
// (broker.JobListed), without its payload, result, progress or error
// history, for a page or a poll that shows none of them.
func (s *Server) readJob(ctx context.Context, queue, id string, whole bool) (jobView, error) {
	read := s.in.JobListed
	if whole {
		read = s.in.Job
	}
	j, err := read(ctx, queue, id)
	if err != nil {
		return jobView{}, err
	}
	jv := jobView{Job: j}
	if j.State == broker.StateRunning {
		now, err := s.in.RedisTime(ctx, queue)
		if err != nil {
			return jobView{}, err
		}
		left := j.LeaseUntil.Sub(now)
		jv.Lease = &leaseView{Generation: j.Generation, Deadline: j.LeaseUntil, Left: left, Expired: left <= 0, Now: now}
	}
	return jv, nil
}

// leaseText is the lease line of a job's page, as the live updates
// refresh it.
func (jv jobView) LeaseText() string {
	switch {
	case jv.Lease == nil:
		return "no lease: the job is " + string(jv.Job.State)
	case jv.Lease.Expired:
		return fmt.Sprintf("expired %s ago, not yet reaped (generation %d still holds it)", age(-jv.Lease.Left), jv.Lease.Generation)
	default:
		return fmt.Sprintf("%s left (generation %d)", age(jv.Lease.Left), jv.Lease.Generation)
	}
}

// releaseView is the confirmation page of a force release.
type releaseView struct {
	Job   jobView
	Here  string
	Back  string
	Queue string
}

func (s *Server) confirmRelease(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	queue, id, jv, ok := s.requestedJob(ctx, w, r, false) // its state and lease only
	if !ok {
		return
	}
	s.render(w, r, http.StatusOK, "release", page{Title: "Release job " + id, Queue: queue,
		Data: releaseView{Job: jv, Here: releaseURL(queue, id), Back: jobURL(queue, id), Queue: queue}})
}

// requestedJob reads the job a request names, in a queue that exists, whole
// or not (readJob). When it cannot, it has answered the request, and ok is
// false.
func (s *Server) requestedJob(ctx context.Context, w http.ResponseWriter, r *http.Request, whole bool) (queue, id string, jv jobView, ok bool) {
	queue, id = queueParam(r), idParam(r)
	if !s.knownQueue(ctx, w, r, queue) {
		return queue, id, jv, false
	}
	jv, err := s.readJob(ctx, queue, id, whole)
	if err != nil {
		s.failErr(w, r, "read job "+id, err)
		return queue, id, jv, false
	}
	return queue, id, jv, true
}
