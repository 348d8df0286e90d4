package dashboard

import (
	"context"
	"net/http"

	"github.com/fenceq/fenceq/broker"
)

// expiredShown bounds the expired leases a page counts or lists: past it,
// the page says "at least".
const expiredShown = 100

// queueSummary is one queue as the overview shows it.
type queueSummary struct {
	Name    string
	O       broker.Overview
	Limits  string
	Expired int  // expired leases not yet reaped, up to expiredShown
	More    bool // more than expiredShown expired
	Chart   chartView
}

// Key names a figure of the queue for the live updates (live.go).
func (q queueSummary) Key(field string) string { return field + "|" + q.Name }

func (s *Server) summarize(ctx context.Context, queue string) (queueSummary, error) {
	q := queueSummary{Name: queue}
	var err error
	if q.O, err = s.b.Overview(ctx, queue); err != nil {
		return q, err
	}
	l, err := s.b.Limits(ctx, queue)
	if err != nil {
		return q, err
	}
	q.Limits = l.String()
	exp, err := s.b.ExpiredLeases(ctx, queue, expiredShown+1)
	if err != nil {
		return q, err
	}
	q.Expired, q.More = min(len(exp), expiredShown), len(exp) > expiredShown
	return q, nil
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	names, err := s.b.Queues(ctx)
	if err != nil {
		s.failErr(w, r, "list queues", err)
		return
	}
	qs := make([]queueSummary, 0, len(names))
	for _, name := range names {
		q, err := s.summarize(ctx, name)
		if err != nil {
			s.failErr(w, r, "read queue "+name, err)
			return
		}
		q.Chart = s.chart(ctx, name)
		qs = append(qs, q)
	}
	s.render(w, r, http.StatusOK, "overview", page{Title: "Queues", Live: Mount + "live", Data: struct {
		Queues []queueSummary
		Prefix string
	}{qs, s.b.Prefix()}})
}
