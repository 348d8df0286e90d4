package dashboard

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// expiredShown bounds the expired leases a page counts or lists: past it,
// the page says "at least".
const expiredShown = 100

// queueSummary is one queue as the overview shows it.
type queueSummary struct {
	Name    string
	O       broker.Overview
	Limits  string        // as the page reads them
	L       broker.Limits // as the limits form starts from them
	Expired int           // expired leases not yet reaped, up to expiredShown
	More    bool          // more than expiredShown expired
	Chart   chartView
}

// LimitValue is a field of the limits form as it starts: the queue's limit
// now, or empty when it has none.
func (q queueSummary) LimitValue(field string) string {
	switch {
	case field == "max_running" && q.L.MaxRunning > 0:
		return strconv.Itoa(q.L.MaxRunning)
	case field == "rate" && q.L.Rate > 0:
		return strconv.Itoa(q.L.Rate)
	case field == "per" && q.L.Rate > 0:
		return period(q.L.Per)
	}
	return ""
}

// period writes a duration as one types it: 1m, not 1m0s.
func period(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Key names a figure of the queue for the live updates (live.go).
func (q queueSummary) Key(field string) string { return field + "|" + q.Name }

func (s *Server) summarize(ctx context.Context, queue string) (queueSummary, error) {
	q := queueSummary{Name: queue}
	var err error
	if q.O, err = s.in.Overview(ctx, queue); err != nil {
		return q, err
	}
	l, err := s.in.Limits(ctx, queue)
	if err != nil {
		return q, err
	}
	q.Limits, q.L = l.String(), l
	exp, err := s.in.ExpiredLeases(ctx, queue, expiredShown+1)
	if err != nil {
		return q, err
	}
	q.Expired, q.More = min(len(exp), expiredShown), len(exp) > expiredShown
	return q, nil
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := reqCtx(r)
	defer cancel()
	names, err := s.in.Queues(ctx)
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
	}{qs, s.in.Prefix()}})
}
