package dashboard

import (
	"net/http"

	"github.com/fenceq/fenceq/broker"
)

// leasesShown bounds the leases the leases page lists.
const leasesShown = 200

// leasesView is a queue's leases page.
type leasesView struct {
	Summary queueSummary
	Expired []leaseRow
	Leases  []leaseRow
	More    bool // more running jobs than Leases lists
	Here    string
	// NoHolders says why the holders are not shown: the registry could
	// not be read. "" when they are.
	NoHolders string
}

// leaseRow is one lease on the leases page, with the pool that holds it.
type leaseRow struct {
	broker.LeaseInfo
	Holder *holderView // nil: no live pool lists it
}

func (s *Server) leases(w http.ResponseWriter, r *http.Request) {
	queue := queueParam(r)
	ctx, cancel := reqCtx(r)
	defer cancel()
	if !s.knownQueue(ctx, w, r, queue) {
		return
	}
	sum, err := s.summarize(ctx, queue)
	if err != nil {
		s.failErr(w, r, "read queue "+queue, err)
		return
	}
	lv := leasesView{Summary: sum, Here: leasesURL(queue)}
	expired, err := s.in.ExpiredLeases(ctx, queue, leasesShown)
	if err != nil {
		s.failErr(w, r, "read the expired leases of "+queue, err)
		return
	}
	all, err := s.in.Leases(ctx, queue, leasesShown)
	if err != nil {
		s.failErr(w, r, "read the leases of "+queue, err)
		return
	}
	// The holders are a help, not the page: without the registry the
	// leases are still shown.
	ws, err := s.in.Workers(ctx)
	if err != nil {
		lv.NoHolders = "The worker registry could not be read (" + err.Error() + "), so the holders are not shown. Reload to try again."
	}
	row := func(l broker.LeaseInfo) leaseRow {
		// A lease's Left was measured on the Redis clock: its deadline
		// less it is that clock's now.
		return leaseRow{LeaseInfo: l, Holder: holderOf(ws, queue, l.ID, l.Generation, l.Deadline.Add(-l.Left))}
	}
	for _, l := range expired {
		lv.Expired = append(lv.Expired, row(l))
	}
	for _, l := range all {
		if !l.Expired() {
			lv.Leases = append(lv.Leases, row(l))
		}
	}
	lv.More = sum.O.Running > int64(len(all))
	s.render(w, r, http.StatusOK, "leases", page{Title: "Leases of " + queue, Queue: queue, Live: liveURL(queue, ""), Data: lv})
}
