package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// groupsView is a queue's groups page.
type groupsView struct {
	Page   broker.GroupsPage
	Find   string // the group the find form named, "" for the listing
	Limit  int
	Action string
	Hidden url.Values // the find form's hidden fields (the queue, when the path cannot carry it)
	All    string     // the listing without a name
	Cap    int        // broker.GroupsScanCap
}

// Rows are the page's groups, each with the link to its pending jobs.
func (gv groupsView) Rows(queue string) []groupRow {
	out := make([]groupRow, len(gv.Page.Groups))
	for i, g := range gv.Page.Groups {
		out[i] = groupRow{GroupInfo: g, Pending: groupJobsURL(queue, g.Name)}
	}
	return out
}

type groupRow struct {
	broker.GroupInfo
	Pending string // its pending jobs on the queue's page
}

// MaxText, RateText and State are what a row's columns show.
func (g groupRow) MaxText() string {
	if g.MaxRunning == 0 {
		return "none"
	}
	return strconv.Itoa(g.MaxRunning)
}

func (g groupRow) RateText() string {
	if g.Rate == 0 {
		return "none"
	}
	per := g.Per.String()
	switch {
	case g.Per%time.Hour == 0:
		per = fmt.Sprintf("%dh", g.Per/time.Hour)
	case g.Per%time.Minute == 0:
		per = fmt.Sprintf("%dm", g.Per/time.Minute)
	case g.Per%time.Second == 0:
		per = fmt.Sprintf("%ds", g.Per/time.Second)
	}
	return fmt.Sprintf("%d per %s", g.Rate, per)
}

func (g groupRow) State() string {
	switch {
	case g.Waiting:
		return "waits until " + when(g.WaitUntil)
	case g.InTurn:
		return "in turn"
	case g.Ready > 0:
		return "—"
	}
	return "nothing ready"
}

// defaultsText says what the queue's group defaults are.
func (gv groupsView) DefaultsText() string {
	d := groupRow{GroupInfo: gv.Page.Defaults}
	s := "max running " + d.MaxText() + " · rate " + d.RateText()
	if d.Ordered {
		s += " · ordered"
	}
	return s
}

func (s *Server) groups(w http.ResponseWriter, r *http.Request) {
	queue := queueParam(r)
	ctx, cancel := reqCtx(r)
	defer cancel()
	if !s.knownQueue(ctx, w, r, queue) {
		return
	}
	in := r.URL.Query()
	gv := groupsView{Find: in.Get("group"), Limit: broker.GroupsLimitDefault, Action: groupsURL(queue), All: groupsURL(queue), Cap: broker.GroupsScanCap}
	if u, _ := url.Parse(gv.Action); u.RawQuery != "" {
		gv.Action, gv.Hidden = u.Path, u.Query()
	}
	if v := in.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > broker.GroupsLimitMax {
			s.fail(w, r, http.StatusBadRequest, "Bad page size", fmt.Sprintf("limit %q: give a number of groups from 1 to %d.", v, broker.GroupsLimitMax))
			return
		}
		gv.Limit = n
	}
	if err := broker.ValidateGroup(gv.Find); err != nil {
		s.fail(w, r, http.StatusBadRequest, "Bad group name", err.Error()+".")
		return
	}
	var err error
	gv.Page, err = s.in.Groups(ctx, queue, broker.GroupsQuery{Name: gv.Find, Limit: gv.Limit})
	if ve := (*broker.ValidationError)(nil); errors.As(err, &ve) {
		s.fail(w, r, http.StatusBadRequest, "Bad request", err.Error())
		return
	}
	if err != nil {
		s.failErr(w, r, "list the groups of "+queue, err)
		return
	}
	s.render(w, r, http.StatusOK, "groups", page{Title: "Groups of " + queue, Queue: queue, Data: gv})
}

func groupsURL(queue string) string {
	if seg, ok := segment(queue); ok {
		return Mount + "queues/" + seg + "/groups"
	}
	return queueURL(queue) + "&view=groups"
}

// groupFindURL is the groups page of one group.
func groupFindURL(queue, group string) string {
	base := groupsURL(queue)
	sep := "?"
	if u, _ := url.Parse(base); u.RawQuery != "" {
		sep = "&"
	}
	return base + sep + url.Values{"group": {group}}.Encode()
}

// groupJobsURL is the queue's page listing one group's pending jobs.
func groupJobsURL(queue, group string) string {
	v := url.Values{"state": {string(broker.StatePending)}, "group": {group}}
	base := queueURL(queue)
	if u, _ := url.Parse(base); u.RawQuery != "" {
		return base + "&" + v.Encode()
	}
	return base + "?" + v.Encode()
}
