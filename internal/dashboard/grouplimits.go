package dashboard

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// groupLimitsView is what a queue's page shows of its group limits: the
// defaults every group takes and, when the page was asked about one group
// (?limits_group=G), that group's.
type groupLimitsView struct {
	Info  broker.GroupLimitsInfo // the defaults, and the number of overrides
	Group string                 // the group asked about, or ""
	Of    broker.GroupLimitsInfo // that group's override and effective limits
}

// Any reports whether the queue has group limits to mention.
func (g groupLimitsView) Any() bool {
	return g.Info.Defaults != (broker.GroupLimits{}) || g.Info.Overrides > 0
}

// Text is the group limits as the page reads them.
func (g groupLimitsView) Text() string {
	s := "each group: " + g.Info.Defaults.String()
	switch n := g.Info.Overrides; {
	case n == 1:
		s += "; 1 group has limits of its own"
	case n > 1:
		s += fmt.Sprintf("; %s groups have limits of their own", count(int64(n)))
	}
	return s
}

// OfText is the asked-about group's limits as the page reads them.
func (g groupLimitsView) OfText() string {
	own := "no limits of its own: the defaults"
	if g.Of.Override != nil {
		own = "its own: " + g.Of.Override.String()
	}
	return g.Of.Effective.String() + " (" + own + ")"
}

// DefaultValue is a field of the group defaults form as it starts: the
// default now, or empty when there is none.
func (g groupLimitsView) DefaultValue(field string) string {
	return limitField(g.Info.Defaults, field, true)
}

// OwnValue is a field of the group form as it starts for the group asked
// about: its override's value, or empty ("default" for ordered) where it
// takes the default.
func (g groupLimitsView) OwnValue(field string) string {
	o := g.Of.Override
	switch {
	case o != nil && (field == "ordered" && o.Ordered || (field == "rate" || field == "per") && o.Rate || field == "max_running" && o.MaxRunning):
		return limitField(o.Limits, field, false)
	case field == "ordered":
		return "default"
	}
	return ""
}

// limitField writes one group limit as a form shows it. A count or rate of
// 0 is empty in the defaults (none) and "0" in an override (none, whatever
// the default); ordered is "yes" or "no".
func limitField(l broker.GroupLimits, field string, defaults bool) string {
	switch field {
	case "max_running":
		if l.MaxRunning > 0 || !defaults {
			return strconv.Itoa(l.MaxRunning)
		}
	case "rate":
		if l.Rate > 0 || !defaults {
			return strconv.Itoa(l.Rate)
		}
	case "per":
		if l.Rate > 0 {
			return period(l.Per)
		}
	case "ordered":
		if l.Ordered {
			return "yes"
		}
		return "no"
	}
	return ""
}

// setGroupLimits changes the group defaults (the form without a group) or
// one group's own limits, as `workerd limit --group-*` does: a field counts
// as entered when it is not empty and differs from the value the form
// showed (its shown_ twin); 0 removes a limit, and for a group "default"
// gives it back to the default. "Reset" removes the group's own limits.
// One step inside Redis (broker.ChangeGroupLimits); a refused change
// writes nothing. The message says what they were before and are now; a
// change of one group returns to the page showing it.
func (s *Server) setGroupLimits(_ http.ResponseWriter, r *http.Request) (string, string, string) {
	queue := r.PostForm.Get("queue")
	named := r.PostForm.Get("scope") == "group"
	group := strings.TrimSpace(r.PostForm.Get("group"))
	what := "Group defaults of " + queue
	if named {
		if group == "" {
			return queue, "", "Group limits unchanged: name the group whose limits to change."
		}
		if err := broker.ValidateGroup(group); err != nil {
			return queue, "", "Group limits unchanged: " + err.Error()
		}
		what = "Group " + group + " of " + queue
		r.PostForm.Set("next", withQuery(r.PostForm.Get("next"), "limits_group", group))
	}
	ch, err := parseGroupLimits(r.PostForm, named)
	if err != nil {
		return queue, group, what + " unchanged: " + err.Error()
	}
	if !ch.MaxRunning && !ch.Rate && !ch.Per && !ch.Ordered && !ch.DefaultMaxRunning && !ch.DefaultRate && !ch.DefaultOrdered && !ch.Reset {
		return queue, group, what + " unchanged: no field was changed (an empty field keeps its limit; 0 removes one)."
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	were, err := s.in.GroupLimits(ctx, queue, group) // only to say what they were
	if err != nil {
		return queue, group, what + " unchanged: " + err.Error()
	}
	if _, err := s.in.ChangeGroupLimits(ctx, queue, group, ch); err != nil {
		var ve *broker.ValidationError
		if errors.As(err, &ve) {
			return queue, group, what + " unchanged: " + ve.Field + ": " + ve.Reason
		}
		return queue, group, what + " unchanged: " + err.Error()
	}
	now, err := s.in.GroupLimits(ctx, queue, group)
	if err != nil {
		return queue, group, what + " changed; reading them back failed: " + err.Error()
	}
	if !named {
		return queue, "", what + " set: each group " + now.Defaults.String() + " (were: " + were.Defaults.String() + ")."
	}
	own := "no limits of its own: the defaults"
	if now.Override != nil {
		own = "its own: " + now.Override.String()
	}
	return queue, group, what + " set: " + now.Effective.String() + "; " + own + ". It was: " + were.Effective.String() + "."
}

// parseGroupLimits reads which group limits a group limits form changes,
// and to what.
func parseGroupLimits(f url.Values, named bool) (broker.GroupLimitsChange, error) {
	var ch broker.GroupLimitsChange
	if named && f.Get("reset") == "1" {
		ch.Reset = true
		return ch, nil
	}
	entered := func(name string) (string, bool) {
		v := strings.TrimSpace(f.Get(name))
		return v, v != "" && v != strings.TrimSpace(f.Get("shown_"+name))
	}
	const keep = "0 removes the limit; leave it empty to keep it"
	orDefault := ""
	if named {
		orDefault = ", default gives the group the queue's default"
	}
	var err error
	if v, ok := entered("max_running"); ok {
		switch {
		case named && v == "default":
			ch.DefaultMaxRunning = true
		default:
			ch.MaxRunning = true
			if ch.To.MaxRunning, err = strconv.Atoi(v); err != nil || ch.To.MaxRunning < 0 {
				return ch, fmt.Errorf("max running per group %q is not a whole number (%s%s)", cut(v, echoMax), keep, orDefault)
			}
		}
	}
	rate, rateOK := entered("rate")
	per, perOK := entered("per")
	switch {
	case named && (rateOK && rate == "default" || perOK && per == "default"):
		ch.DefaultRate = true
	default:
		if rateOK {
			ch.Rate = true
			if ch.To.Rate, err = strconv.Atoi(rate); err != nil || ch.To.Rate < 0 {
				return ch, fmt.Errorf("rate per group %q is not a whole number (%s%s)", cut(rate, echoMax), keep, orDefault)
			}
		}
		if perOK {
			ch.Per = true
			if ch.To.Per, err = time.ParseDuration(per); err != nil || ch.To.Per < time.Millisecond {
				return ch, fmt.Errorf("period %q is not a duration of at least 1ms; write it with a unit, like 1s or 1m", cut(per, echoMax))
			}
		}
	}
	if v, ok := entered("ordered"); ok {
		switch {
		case v == "yes" || v == "no":
			ch.Ordered, ch.To.Ordered = true, v == "yes"
		case named && v == "default":
			ch.DefaultOrdered = true
		default:
			return ch, fmt.Errorf("ordered %q is neither yes nor no", cut(v, echoMax))
		}
	}
	return ch, nil
}

// withQuery is the local path p with the query parameter k set to v.
func withQuery(p, k, v string) string {
	u, err := url.Parse(localPath(p))
	if err != nil {
		return p
	}
	q := u.Query()
	q.Set(k, v)
	u.RawQuery = q.Encode()
	return u.RequestURI()
}
