package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// The operator's deletions and promotions: one job's delete and promote,
// a purge of a finished state, and the bulk actions on a queue page's
// selected rows. Deleting asks first, on a confirmation page; the
// confirmation's form carries the state the user saw, so a job that moved
// on meanwhile is refused (broker.Inspector.Delete).

// purgeTimeout bounds one purge from the dashboard: about 500,000 jobs at
// the steps' pace. A purge stopped by it says how far it got; pressing
// again goes on.
const purgeTimeout = 30 * time.Second

// field is a hidden field of a confirmation form.
type field struct{ Name, Value string }

// confirmView is a confirmation page: what is about to happen, and the
// form that does it.
type confirmView struct {
	Heading string
	Facts   []string
	Explain string
	Refusal string // set when the action cannot be taken: no button then
	Action  string // the form's POST path
	Fields  []field
	IDs     []string // the jobs selected, for a bulk action
	Button  string
	Verb    string // "delete it", for the sign-in line
	Here    string
	Back    string
}

// deleteExplain says what a delete does to a job in state st.
func deleteExplain(st broker.State) string {
	if st.Final() {
		return "The job's record goes for good: its payload, result and errors. Nothing else waits for a finished job."
	}
	return "The job goes for good and never runs. Jobs that depend on it are cancelled (\"dependency … was deleted\"), " +
		"unless they were enqueued to run even if a dependency fails; its unique key is free again; Wait callers get \"not found\"."
}

// confirmDelete is the confirmation page of one job's delete.
func (s *Server) confirmDelete(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	queue, id, jv, ok := s.requestedJob(ctx, w, r, false)
	if !ok {
		return
	}
	st := jv.Job.State
	v := confirmView{
		Heading: "Delete job " + id + "?",
		Facts:   []string{"The job is " + string(st) + "."},
		Explain: deleteExplain(st),
		Action:  Mount + "act/delete",
		Fields:  []field{{"queue", queue}, {"id", id}, {"state", string(st)}, {"next", stateURL(queue, st)}},
		Button:  "Delete it now",
		Verb:    "delete it",
		Here:    deleteURL(queue, id),
		Back:    jobURL(queue, id),
	}
	if st == broker.StateRunning {
		v.Explain = ""
		v.Refusal = "A running job is not deleted: its worker holds a valid lease. Cancel it first (its worker stops it at the next heartbeat and settles it as cancelled), then delete it."
	}
	s.render(w, r, http.StatusOK, "confirm", page{Title: "Delete job " + id, Queue: queue, Data: v})
}

// confirmPurge is the confirmation page of a purge of one finished state.
func (s *Server) confirmPurge(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	queue := queueParam(r)
	if !s.knownQueue(ctx, w, r, queue) {
		return
	}
	st := broker.State(r.URL.Query().Get("state"))
	if !st.Final() {
		s.fail(w, r, http.StatusBadRequest, "Bad request", fmt.Sprintf("state %q cannot be purged: a purge takes done, dead or cancelled (delete other jobs one at a time).", cut(string(st), echoMax)))
		return
	}
	c, err := s.in.Counts(ctx, queue)
	if err != nil {
		s.failErr(w, r, "count the jobs of "+queue, err)
		return
	}
	// The instant of the count, on Redis's clock: the purge takes the
	// jobs that were in the state then, and no job that came after, so the
	// form sent again later deletes nothing the page did not count.
	now, err := s.in.RedisTime(ctx, queue)
	if err != nil {
		s.failErr(w, r, "read the Redis clock for "+queue, err)
		return
	}
	n := map[broker.State]int64{broker.StateDone: c.Done, broker.StateDead: c.Dead, broker.StateCancelled: c.Cancelled}[st]
	back := stateURL(queue, st)
	v := confirmView{
		Heading: fmt.Sprintf("Purge the %s %s job(s) of %s?", count(n), st, queue),
		Facts:   []string{fmt.Sprintf("%s job(s) are %s now.", count(n), st)},
		Explain: "Every job that was " + string(st) + " when this page counted them is deleted for good, in steps of " +
			fmt.Sprint(broker.PurgeStep) + " so Redis stays free for the workers. A job that leaves the state meanwhile (retried) is kept, and so is one that reaches it after this page was shown (pressing again later deletes no more), or that finished within the last " + broker.ResendHorizon.String() + " (a lost reply of its worker may still be sent again).",
		Action: Mount + "act/purge",
		Fields: []field{{"queue", queue}, {"state", string(st)}, {"through", strconv.FormatInt(now.UnixMilli(), 10)}, {"next", back}},
		Button: "Delete them all",
		Verb:   "purge them",
		Here:   purgeURL(queue, st),
		Back:   back,
	}
	if n == 0 {
		v.Refusal = "There is nothing to purge."
	}
	s.render(w, r, http.StatusOK, "confirm", page{Title: "Purge " + string(st) + " jobs of " + queue, Queue: queue, Data: v})
}

// seenState reads a form's state field, the state the user saw: "" or a
// job state.
func seenState(f url.Values) (broker.State, error) {
	st := broker.State(f.Get("state"))
	if st != "" && !slices.Contains(broker.States, st) {
		return "", fmt.Errorf("%q is not a job state", cut(string(st), echoMax))
	}
	return st, nil
}

func (s *Server) deleteJob(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue, id := r.PostForm.Get("queue"), r.PostForm.Get("id")
	seen, err := seenState(r.PostForm)
	if err != nil {
		return queue, id, "Nothing deleted: " + err.Error() + "."
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	st, err := s.in.Delete(ctx, queue, id, seen)
	if err != nil {
		return queue, id, "Job " + id + " not deleted: " + why(err, queue, id) + "."
	}
	return queue, id, fmt.Sprintf("Job %s (%s) deleted.", id, st)
}

func (s *Server) promote(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue, id := r.PostForm.Get("queue"), r.PostForm.Get("id")
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err := s.in.Promote(ctx, queue, id); err != nil {
		return queue, id, "Job " + id + " not promoted: " + why(err, queue, id) + "."
	}
	return queue, id, "Job " + id + " is pending now: it runs at the next free slot."
}

func (s *Server) purge(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue := r.PostForm.Get("queue")
	st := broker.State(r.PostForm.Get("state"))
	if !st.Final() {
		return queue, "", fmt.Sprintf("Nothing purged: %q cannot be purged; a purge takes done, dead or cancelled.", cut(string(st), echoMax))
	}
	through, err := strconv.ParseInt(r.PostForm.Get("through"), 10, 64)
	if err != nil || through <= 0 {
		return queue, "", "Nothing purged: the form does not say when its jobs were counted. Open the queue's purge page again and confirm there."
	}
	ctx, cancel := context.WithTimeout(r.Context(), purgeTimeout)
	defer cancel()
	p, err := s.in.PurgeThrough(ctx, queue, st, time.UnixMilli(through), nil)
	msg := fmt.Sprintf("Purged %s %s job(s) of %s.", count(int64(p.Deleted)), st, queue)
	if p.Skipped > 0 {
		msg += fmt.Sprintf(" %s were kept: no longer %s when the purge reached them.", count(int64(p.Skipped)), st)
	}
	if p.Recent > 0 {
		msg += fmt.Sprintf(" %s were kept: they finished in the last %s, and a lost reply's re-send may still come for them. Purge again in a few seconds.", count(int64(p.Recent)), broker.ResendHorizon)
	}
	if err != nil {
		msg += " Then it stopped: " + err.Error() + ". Purge again to go on."
	}
	return queue, "", msg
}

// bulkOp is one of the bulk actions a queue page offers for its state.
type bulkOp struct {
	Op, Label string
	Danger    bool
}

// bulkOps are the bulk actions that apply to jobs in state st.
func bulkOps(st broker.State) []bulkOp {
	var ops []bulkOp
	if st == broker.StateDead || st == broker.StateCancelled {
		ops = append(ops, bulkOp{"retry", "Retry selected", false})
	}
	if st == broker.StateScheduled {
		ops = append(ops, bulkOp{"promote", "Run selected now", false})
	}
	if !st.Final() {
		ops = append(ops, bulkOp{"cancel", "Cancel selected", false})
	}
	if st != broker.StateRunning {
		ops = append(ops, bulkOp{"delete", "Delete selected…", true})
	}
	return ops
}

// bulk runs one action on the rows selected on a queue's page: each job
// on its own, each answered (done, or refused and why), at most
// broker.PageLimitMax of them (a page). A delete shows its confirmation
// page first.
func (s *Server) bulk(w http.ResponseWriter, r *http.Request) {
	name, ok := s.allowed(w, r)
	if !ok {
		return
	}
	queue, op := r.PostForm.Get("queue"), r.PostForm.Get("op")
	// The ids once each, in the order sent (a map: a form may carry
	// many thousands).
	var ids []string
	seenID := map[string]bool{}
	for _, id := range r.PostForm["id"] {
		if !seenID[id] {
			seenID[id] = true
			ids = append(ids, id)
		}
	}
	seen, err := seenState(r.PostForm)
	label := map[string]string{"retry": "Retried", "cancel": "Cancelled", "delete": "Deleted", "promote": "Promoted"}[op]
	switch {
	case label == "":
		s.acted(w, r, name, queue, "", fmt.Sprintf("Nothing done: %q is not a bulk action (retry, cancel, delete or promote).", cut(op, echoMax)))
		return
	case err != nil:
		s.acted(w, r, name, queue, "", "Nothing done: "+err.Error()+".")
		return
	case len(ids) == 0:
		s.acted(w, r, name, queue, "", "Nothing done: no job was selected. Tick the rows to act on, or the box in the header for the whole page.")
		return
	case len(ids) > broker.PageLimitMax:
		s.acted(w, r, name, queue, "", fmt.Sprintf("Nothing done: %d jobs selected, at most %d at a time.", len(ids), broker.PageLimitMax))
		return
	}
	if op == "delete" && r.PostForm.Get("confirm") != "1" {
		next := r.PostForm.Get("next")
		st := string(seen)
		s.render(w, r, http.StatusOK, "confirm", page{Title: "Delete jobs of " + queue, Queue: queue, Data: confirmView{
			Heading: fmt.Sprintf("Delete %d %s job(s) of %s?", len(ids), st, queue),
			Facts:   []string{"These jobs were " + st + " on the page you selected them on; one that is no longer " + st + " is left as it is."},
			Explain: deleteExplain(seen),
			Action:  Mount + "act/bulk",
			Fields:  []field{{"queue", queue}, {"op", "delete"}, {"state", st}, {"confirm", "1"}, {"next", next}},
			IDs:     ids,
			Button:  fmt.Sprintf("Delete %d job(s) now", len(ids)),
			Verb:    "delete them",
			Back:    localPath(next),
		}})
		return
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	done := 0
	var refused []string
	for _, id := range ids {
		var err error
		switch op {
		case "retry":
			_, err = s.in.Retry(ctx, queue, id)
		case "cancel":
			var st broker.State
			if st, err = s.in.Cancel(ctx, queue, id); err == nil && st.Final() && st != broker.StateCancelled {
				err = fmt.Errorf("had already finished (%s)", st)
			}
		case "delete":
			_, err = s.in.Delete(ctx, queue, id, seen)
		case "promote":
			err = s.in.Promote(ctx, queue, id)
		}
		if err != nil {
			refused = append(refused, fmt.Sprintf("%s %s", clip(id, 40), why(err, queue, id)))
			continue
		}
		done++
	}
	msg := fmt.Sprintf("%s %d of %d.", label, done, len(ids))
	if op == "cancel" && seen == broker.StateRunning && done > 0 {
		msg += " Running jobs are flagged: their workers stop them at the next heartbeat."
	}
	if len(refused) > 0 {
		shown := refused[:min(len(refused), 5)]
		msg += fmt.Sprintf(" Refused %d: %s", len(refused), strings.Join(shown, "; "))
		if len(refused) > len(shown) {
			msg += fmt.Sprintf("; and %d more", len(refused)-len(shown))
		}
		msg += "."
	}
	s.acted(w, r, name+" "+op, queue, strings.Join(ids[:min(len(ids), 5)], ","), msg)
}

// why is a short reason an operation on job id of queue was refused, to
// follow the job's id in a message.
func why(err error, queue, id string) string {
	var se *broker.StateError
	var ve *broker.ValidationError
	switch {
	case errors.As(err, &se) && se.Seen != "" && se.Seen != se.State:
		return "is " + string(se.State) + " now, not " + string(se.Seen)
	case errors.As(err, &se) && se.Op == "delete" && se.State == broker.StateRunning:
		return "is running: cancel it first"
	case errors.As(err, &se) && se.Op == "promote":
		return "is " + string(se.State) + ": only a scheduled job can be promoted"
	case errors.As(err, &se):
		return "is " + string(se.State)
	case errors.Is(err, broker.ErrJobNotFound):
		return "is not there (deleted already?)"
	case errors.As(err, &ve):
		return ve.Field + " " + ve.Reason
	}
	// Retry's refusals: "fenceq: job "x" in queue "q" is pending; only …",
	// "… stays dead: its unique key is held by job y".
	msg := strings.TrimPrefix(err.Error(), "fenceq: ")
	msg = strings.TrimPrefix(msg, fmt.Sprintf("job %q in queue %q ", id, queue))
	return clip(msg, 160)
}

// stateURL is the page of queue's jobs in state st.
func stateURL(queue string, st broker.State) string {
	base := queueURL(queue)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	return base + sep + url.Values{"state": {string(st)}}.Encode()
}
