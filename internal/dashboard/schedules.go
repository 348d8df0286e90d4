package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// schedulesView is the schedules page: every periodic job, stored in
// Redis or in a running pool's config, and the form that adds one.
type schedulesView struct {
	Rows []scheduleRow
	Max  int // broker.SchedulesMax
	// Form is what the add form shows: empty, or what a refused add sent
	// (kept in the query, so that a mistake is corrected, not retyped).
	Form url.Values
}

type scheduleRow struct {
	broker.ScheduleInfo
}

// Stored reports whether the dashboard may change it: one stored in
// Redis, not one of a pool's config.
func (r scheduleRow) Stored() bool { return r.Source == broker.SourceRedis }

// State is what the state column says.
func (r scheduleRow) State() string {
	switch {
	case r.Problem != "":
		return "unreadable"
	case r.Shadowed:
		return "ignored"
	case r.Paused:
		return "paused"
	}
	return "active"
}

// StateTitle explains the state.
func (r scheduleRow) StateTitle() string {
	switch {
	case r.Problem != "":
		return "This entry cannot be read (" + r.Problem + "); no pool fires it. Remove it and add it again."
	case r.Shadowed:
		return "A running pool's configuration has a schedule of this name: those pools fire their own, and ignore this one. Rename or remove it."
	case r.Paused:
		return "No tick of it fires until it is resumed; the ticks missed meanwhile do not fire then."
	}
	return "Every pool fires its ticks; each tick's job is enqueued once."
}

// LastURL is the page of its last run's job.
func (r scheduleRow) LastURL() string { return jobURL(r.Job.Queue, r.LastJob) }

// RemoveURL is the page that confirms its removal.
func (r scheduleRow) RemoveURL() string {
	return Mount + "schedules/remove?" + url.Values{"name": {r.Name}}.Encode()
}

// JobText is its job in brief: queue, kind, and the payload's size.
func (r scheduleRow) JobText() string {
	s := r.Job.Kind
	if n := len(r.Job.Payload); n > 0 {
		s += fmt.Sprintf(" (%d-byte payload)", n)
	}
	return s
}

func (s *Server) schedules(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	list, err := s.in.Schedules().List(ctx)
	if err != nil {
		s.failErr(w, r, "list the schedules", err)
		return
	}
	v := schedulesView{Max: broker.SchedulesMax, Form: url.Values{}}
	for _, k := range []string{"name", "spec", "queue", "kind", "payload", "catch_up"} {
		if x := r.URL.Query().Get(k); x != "" {
			v.Form.Set(k, cut(x, refilledMax))
		}
	}
	for _, si := range list {
		v.Rows = append(v.Rows, scheduleRow{si})
	}
	s.render(w, r, http.StatusOK, "schedules", page{Title: "Schedules", Data: v})
}

// refilledMax bounds a field a refused add form is shown again with.
const refilledMax = 2000

// scheduleRemoveView is the page that confirms a removal.
type scheduleRemoveView struct {
	Row  scheduleRow
	Back string
	Here string
}

func (s *Server) confirmScheduleRemove(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	ctx, cancel := reqCtx(r)
	defer cancel()
	si, err := s.in.Schedules().Get(ctx, name)
	switch {
	case errors.Is(err, broker.ErrScheduleNotFound):
		s.fail(w, r, http.StatusNotFound, "Schedule not found", cut(err.Error(), echoMax*3)+". It may have been removed already.")
		return
	case err != nil:
		s.failErr(w, r, "read the schedule", err)
		return
	}
	s.render(w, r, http.StatusOK, "schedule_remove", page{Title: "Remove schedule " + name, Data: scheduleRemoveView{
		Row: scheduleRow{si}, Back: Mount + "schedules", Here: localPath(r.URL.RequestURI()),
	}})
}

// The schedule actions. Each answers "" for the queue (a schedule belongs
// to none), the schedule's name for the id, and the message to show.

func (s *Server) scheduleAdd(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	f := r.PostForm
	name := strings.TrimSpace(f.Get("name"))
	sc, err := parseScheduleForm(f)
	if err == nil {
		ctx, cancel := reqCtx(r)
		err = s.in.Schedules().Add(ctx, sc)
		cancel()
	}
	if err != nil {
		// Back to the form as it was sent, to correct rather than retype.
		again := url.Values{}
		for _, k := range []string{"name", "spec", "queue", "kind", "payload", "catch_up"} {
			if v := f.Get(k); v != "" {
				again.Set(k, cut(v, refilledMax))
			}
		}
		f.Set("next", Mount+"schedules?"+again.Encode()+"#add")
		return "", name, "Schedule not added: " + strings.TrimPrefix(err.Error(), "fenceq: ")
	}
	return "", name, fmt.Sprintf("Schedule %s added (%s): every pool fires it within a few seconds, without a restart.", name, sc.Spec())
}

// parseScheduleForm reads the add form: the name, the spec ("every 5m"
// or a cron expression), the job's queue, kind and JSON payload, and
// catch-up.
func parseScheduleForm(f url.Values) (broker.Schedule, error) {
	sc := broker.Schedule{Name: strings.TrimSpace(f.Get("name")), CatchUp: f.Get("catch_up") != ""}
	spec := strings.TrimSpace(f.Get("spec"))
	switch rest, ok := strings.CutPrefix(spec, "every "); {
	case spec == "":
		return sc, errors.New(`give a schedule: "every 5m", or a cron expression such as "0 3 * * *" (UTC)`)
	case ok:
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return sc, fmt.Errorf("%q is not an interval: write it with a unit, like \"every 30s\" or \"every 1h\"", cut(spec, echoMax))
		}
		sc.Every = d
	default:
		sc.Cron = spec
	}
	sc.Job = broker.Job{Queue: strings.TrimSpace(f.Get("queue")), Kind: strings.TrimSpace(f.Get("kind"))}
	if p := strings.TrimSpace(f.Get("payload")); p != "" {
		sc.Job.Payload = []byte(p)
	}
	return sc, nil
}

func (s *Server) schedulePause(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	name := r.PostForm.Get("name")
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err := s.in.Schedules().Pause(ctx, name); err != nil {
		return "", name, "Schedule not paused: " + strings.TrimPrefix(err.Error(), "fenceq: ")
	}
	return "", name, "Schedule " + name + " is paused: no pool fires a tick of it until it is resumed."
}

func (s *Server) scheduleResume(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	name := r.PostForm.Get("name")
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err := s.in.Schedules().Resume(ctx, name); err != nil {
		return "", name, "Schedule not resumed: " + strings.TrimPrefix(err.Error(), "fenceq: ")
	}
	return "", name, "Schedule " + name + " is resumed: its next tick fires; those missed while it was paused do not."
}

func (s *Server) scheduleRemove(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	name := r.PostForm.Get("name")
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err := s.in.Schedules().Remove(ctx, name); err != nil {
		return "", name, "Schedule not removed: " + strings.TrimPrefix(err.Error(), "fenceq: ")
	}
	return "", name, "Schedule " + name + " is removed: no pool fires it any more; its jobs already enqueued stay."
}
