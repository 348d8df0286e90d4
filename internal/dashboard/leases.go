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
	Expired []broker.LeaseInfo
	Leases  []broker.LeaseInfo
	More    bool // more running jobs than Leases lists
	Here    string
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
	if lv.Expired, err = s.in.ExpiredLeases(ctx, queue, leasesShown); err != nil {
		s.failErr(w, r, "read the expired leases of "+queue, err)
		return
	}
	all, err := s.in.Leases(ctx, queue, leasesShown)
	if err != nil {
		s.failErr(w, r, "read the leases of "+queue, err)
		return
	}
	for _, l := range all {
		if !l.Expired() {
			lv.Leases = append(lv.Leases, l)
		}
	}
	lv.More = sum.O.Running > int64(len(all))
	s.render(w, r, http.StatusOK, "leases", page{Title: "Leases of " + queue, Queue: queue, Live: liveURL(queue, ""), Data: lv})
}
