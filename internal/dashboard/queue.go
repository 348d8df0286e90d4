package dashboard

import (
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/fenceq/fenceq/broker"
)

// tab is one state's tab on a queue's page.
type tab struct {
	State  broker.State
	Count  int64
	URL    string
	Active bool
}

// queueView is a queue's page.
type queueView struct {
	Summary    queueSummary
	Tabs       []tab
	State      broker.State
	Newest     bool
	Kind       string
	Prefix     string
	Group      string // the group filter: for pending jobs, the group's own index
	Page       broker.Page
	First      bool     // the page starts at the head of the index
	NextURL    string   // the next page, "" at the end
	FirstURL   string   // the first page with the same filters
	Here       string   // this page, for the forms' return
	Cancelable bool     // jobs in this state can be cancelled
	Bulk       []bulkOp // the actions on selected rows this state offers
	PurgeURL   string   // the purge confirmation of a finished state; "" for the others
	FormAction string   // the filter form's action
	FormQueue  bool     // the form carries the queue in a field (see queueURL)
	WhenLabel  string   // what the time column shows
	ErrorFirst bool     // the last error is the key column (dead jobs), else the time is
	Grouped    bool     // a job of the page has a group: the Group column shows
	Groups     groupLimitsView
}

// Filtered says whether the page keeps only some of the state's jobs.
func (qv queueView) Filtered() bool { return qv.Kind != "" || qv.Prefix != "" || qv.Group != "" }

// Examining says whether the page filters the entries of the state's
// index (and says how many it looked at): a kind, an id prefix, or a group
// outside the pending state, whose group has an index of its own.
func (qv queueView) Examining() bool {
	return qv.Kind != "" || qv.Prefix != "" || qv.Group != "" && qv.State != broker.StatePending
}

// GroupOnly is the group whose pending jobs alone the page lists.
func (qv queueView) GroupOnly() string {
	if qv.State == broker.StatePending && qv.Group != "" {
		return qv.Group
	}
	return ""
}

// When is the time a job's row shows: the one that matters in its state.
func (qv queueView) When(j broker.JobInfo) string {
	switch qv.State {
	case broker.StateScheduled, broker.StatePending:
		return when(j.RunAt)
	case broker.StateRunning:
		return when(j.LeaseUntil)
	case broker.StateBlocked:
		return when(j.CreatedAt)
	}
	return when(j.FinishedAt)
}

func (s *Server) queue(w http.ResponseWriter, r *http.Request) {
	queue := queueParam(r)
	switch r.URL.Query().Get("view") {
	case "leases":
		s.leases(w, r)
		return
	case "groups":
		s.groups(w, r)
		return
	case "purge":
		s.confirmPurge(w, r)
		return
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	if !s.knownQueue(ctx, w, r, queue) {
		return
	}
	qv := queueView{State: broker.StatePending}
	in := r.URL.Query()
	if st := in.Get("state"); st != "" {
		qv.State = broker.State(st)
	}
	valid := false
	for _, st := range broker.States {
		valid = valid || st == qv.State
	}
	if !valid {
		s.fail(w, r, http.StatusBadRequest, "Unknown state", fmt.Sprintf("%q is not a job state; pick one of %v.", qv.State, broker.States))
		return
	}
	switch in.Get("order") {
	case "newest":
		qv.Newest = true
	case "oldest":
	case "":
		qv.Newest = qv.State.Final() // finished jobs: the latest first
	default:
		s.fail(w, r, http.StatusBadRequest, "Unknown order", fmt.Sprintf("order %q is neither newest nor oldest.", in.Get("order")))
		return
	}
	qv.Kind, qv.Prefix, qv.Group = in.Get("kind"), in.Get("prefix"), in.Get("group")
	if err := broker.ValidateGroup(qv.Group); err != nil {
		s.fail(w, r, http.StatusBadRequest, "Bad group name", err.Error()+".")
		return
	}
	limit := 0
	if v := in.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > broker.PageLimitMax {
			s.fail(w, r, http.StatusBadRequest, "Bad page size", fmt.Sprintf("limit %q: give a number of jobs from 1 to %d.", v, broker.PageLimitMax))
			return
		}
		limit = n
	}
	var err error
	if qv.Summary, err = s.summarize(ctx, queue); err != nil {
		s.failErr(w, r, "read queue "+queue, err)
		return
	}
	qv.Groups.Group = in.Get("limits_group")
	if err := broker.ValidateGroup(qv.Groups.Group); err != nil {
		s.fail(w, r, http.StatusBadRequest, "Bad group", fmt.Sprintf("limits_group: %v", err))
		return
	}
	if qv.Groups.Of, err = s.in.GroupLimits(ctx, queue, qv.Groups.Group); err != nil {
		s.failErr(w, r, "read the group limits of "+queue, err)
		return
	}
	qv.Groups.Info = qv.Groups.Of
	qv.Page, err = s.in.JobPage(ctx, queue, broker.JobQuery{
		State: qv.State, Newest: qv.Newest, Kind: qv.Kind, IDPrefix: qv.Prefix, Group: qv.Group, After: in.Get("after"), Limit: limit,
	})
	if err != nil {
		s.failErr(w, r, "list jobs of "+queue, err)
		return
	}
	counts := qv.Summary.counts()
	base := queueURL(queue)
	link := func(v url.Values) string {
		sep := "?"
		if u, _ := url.Parse(base); u.RawQuery != "" {
			sep = "&"
		}
		return base + sep + v.Encode()
	}
	for _, st := range broker.States {
		qv.Tabs = append(qv.Tabs, tab{State: st, Count: counts[st], URL: link(url.Values{"state": {string(st)}}), Active: st == qv.State})
	}
	keep := url.Values{"state": {string(qv.State)}}
	if qv.Kind != "" {
		keep.Set("kind", qv.Kind)
	}
	if qv.Prefix != "" {
		keep.Set("prefix", qv.Prefix)
	}
	if qv.Group != "" {
		keep.Set("group", qv.Group)
	}
	if in.Get("order") != "" {
		keep.Set("order", in.Get("order"))
	}
	if limit > 0 {
		keep.Set("limit", strconv.Itoa(limit))
	}
	qv.FirstURL = link(keep)
	qv.First = in.Get("after") == ""
	if qv.Page.Next != "" {
		next := url.Values{}
		for k, v := range keep {
			next[k] = v
		}
		next.Set("after", qv.Page.Next)
		qv.NextURL = link(next)
	}
	qv.Here = r.URL.RequestURI()
	qv.FormAction = base
	if u, _ := url.Parse(base); u.RawQuery != "" {
		qv.FormAction, qv.FormQueue = u.Path, true
	}
	qv.WhenLabel = map[broker.State]string{
		broker.StateScheduled: "Runs at", broker.StatePending: "Due since", broker.StateRunning: "Lease until",
		broker.StateBlocked: "Enqueued",
	}[qv.State]
	if qv.WhenLabel == "" {
		qv.WhenLabel = "Finished"
	}
	qv.Cancelable = !qv.State.Final()
	qv.Bulk = bulkOps(qv.State)
	if qv.State.Final() {
		qv.PurgeURL = purgeURL(queue, qv.State)
	}
	qv.ErrorFirst = qv.State == broker.StateDead
	qv.Grouped = qv.Group == "" && slices.ContainsFunc(qv.Page.Jobs, func(j broker.JobInfo) bool { return j.Group != "" })
	s.render(w, r, http.StatusOK, "queue", page{Title: queue, Queue: queue, Live: liveURL(queue, ""), Data: qv})
}
