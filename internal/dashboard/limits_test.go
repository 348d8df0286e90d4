package dashboard_test

import (
	"context"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

var (
	limitsFormRE = regexp.MustCompile(`(?s)<form method="post" action="/ui/act/limits".*?</form>`)
	inputRE      = regexp.MustCompile(`<input [^>]*>`)
	attrRE       = regexp.MustCompile(`(name|value)="([^"]*)"`)
)

// limitsForm reads the limits form off a queue's page as a browser would
// send it untouched: every input's name and value.
func (r *rig) limitsForm(c *http.Client, queue string) url.Values {
	r.t.Helper()
	_, body := r.get(c, "/ui/queues/"+url.PathEscape(queue))
	form := limitsFormRE.FindString(body)
	if form == "" {
		r.t.Fatal("the queue page has no limits form")
	}
	v := url.Values{}
	for _, in := range inputRE.FindAllString(form, -1) {
		var name, value string
		for _, a := range attrRE.FindAllStringSubmatch(in, -1) {
			if a[1] == "name" {
				name = html.UnescapeString(a[2])
			} else {
				value = html.UnescapeString(a[2])
			}
		}
		v.Set(name, value)
	}
	return v
}

// TestLimitsFormKeepsWhatWasNotChanged: the limits form starts from the
// queue's limits, and submitting it changes only the fields the user
// changed, as `workerd limit` does: setting a rate keeps max running.
func TestLimitsFormKeepsWhatWasNotChanged(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	r.signIn(c)
	ctx := context.Background()
	if _, err := r.b.Client().Enqueue(ctx, broker.Job{Queue: "mail", Kind: "send"}); err != nil {
		t.Fatal(err)
	}
	limits := func() broker.Limits {
		t.Helper()
		l, err := r.b.Inspector().Limits(ctx, "mail")
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	submit := func(f url.Values) string {
		t.Helper()
		f.Set("next", "/ui/queues/mail")
		r.post(c, "/ui/act/limits", f)
		_, body := r.get(c, "/ui/queues/mail")
		return html.UnescapeString(body)
	}
	if err := r.b.Inspector().SetMaxRunning(ctx, "mail", 5); err != nil {
		t.Fatal(err)
	}

	f := r.limitsForm(c, "mail")
	if f.Get("max_running") != "5" || f.Get("rate") != "" {
		t.Errorf("the form does not start from the queue's limits (max running 5, no rate): %v", f)
	}
	f.Set("rate", "100")
	f.Set("per", "1m")
	body := submit(f)
	if l := limits(); l != (broker.Limits{MaxRunning: 5, Rate: 100, Per: time.Minute}) {
		t.Fatalf("setting a rate made the limits %+v; want max running 5 kept", l)
	}
	if !strings.Contains(body, "at most 5 running, at most 100 starts per 1m0s") {
		t.Error("the page after the form does not say what the limits are now")
	}

	f = r.limitsForm(c, "mail")
	if f.Get("rate") != "100" || f.Get("per") != "1m" {
		t.Fatalf("the form does not show the rate it set: %v", f)
	}
	// Another operator sets max running meanwhile: a form that did not
	// change it keeps theirs.
	if err := r.b.Inspector().SetMaxRunning(ctx, "mail", 7); err != nil {
		t.Fatal(err)
	}
	f.Set("rate", "200")
	submit(f)
	if l := limits(); l != (broker.Limits{MaxRunning: 7, Rate: 200, Per: time.Minute}) {
		t.Fatalf("changing the rate made the limits %+v; want the other operator's max running 7 kept", l)
	}

	// A form without the shown values (a script's POST): an empty field
	// keeps its limit, 0 removes one.
	post := func(kv ...string) string {
		v := url.Values{"queue": {"mail"}, "csrf": {r.limitsForm(c, "mail").Get("csrf")}}
		for i := 0; i < len(kv); i += 2 {
			v.Set(kv[i], kv[i+1])
		}
		return submit(v)
	}
	post("max_running", "0", "rate", "")
	if l := limits(); l != (broker.Limits{Rate: 200, Per: time.Minute}) {
		t.Fatalf("max running 0 made the limits %+v; want it removed and the rate kept", l)
	}
	post("per", "1s")
	if l := limits(); l != (broker.Limits{Rate: 200, Per: time.Second}) {
		t.Fatalf("a new period made the limits %+v; want the rate kept with it", l)
	}
	post("rate", "0")
	if l := limits(); l != (broker.Limits{}) {
		t.Fatalf("rate 0 made the limits %+v; want none", l)
	}

	for _, tc := range []struct {
		kv   []string
		want string
	}{
		{[]string{"per", "1m"}, "a period needs a rate"},
		{[]string{"rate", "10"}, "a rate needs its period"},
		{[]string{"max_running", "many"}, `max running "many" is not a whole number`},
		{[]string{"max_running", "3", "per", "soon"}, `period "soon" is not a duration`},
		{nil, "no field was changed"},
	} {
		if body := post(tc.kv...); !strings.Contains(body, tc.want) {
			t.Errorf("a form of %q does not say %q", tc.kv, tc.want)
		}
		if l := limits(); l != (broker.Limits{}) {
			t.Fatalf("a refused form of %q changed the limits: %+v", tc.kv, l)
		}
	}
}
