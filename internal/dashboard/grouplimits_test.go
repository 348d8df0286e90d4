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
	selectRE   = regexp.MustCompile(`(?s)<select name="([^"]+)">(.*?)</select>`)
	selectedRE = regexp.MustCompile(`<option value="([^"]*)" selected>`)
)

// formByID reads the form of that id off a page as a browser would send it
// untouched: every input's name and value, every select's chosen option.
// It answers nil when the page has no such form.
func (r *rig) formByID(c *http.Client, path, id string) (url.Values, string) {
	r.t.Helper()
	code, body := r.get(c, path)
	if code != http.StatusOK {
		r.t.Fatalf("GET %s answered %d:\n%s", path, code, body)
	}
	form := regexp.MustCompile(`(?s)<form [^>]*id="` + id + `".*?</form>`).FindString(body)
	if form == "" {
		return nil, body
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
	for _, s := range selectRE.FindAllStringSubmatch(form, -1) {
		m := selectedRE.FindStringSubmatch(s[2])
		if m == nil {
			m = regexp.MustCompile(`<option value="([^"]*)"`).FindStringSubmatch(s[2])
		}
		v.Set(s[1], m[1])
	}
	return v, body
}

// The group defaults form starts from the queue's group defaults and
// changes only the fields the user changed; one group's form (reached by
// its name) sets, gives back and resets that group's own limits.
func TestGroupLimitsForms(t *testing.T) {
	r := setup(t, token)
	c := r.client()
	r.signIn(c)
	ctx := context.Background()
	if _, err := r.b.Client().Enqueue(ctx, broker.Job{Queue: "mail", Kind: "send", Group: "acme"}); err != nil {
		t.Fatal(err)
	}
	in := r.b.Inspector()
	read := func(group string) broker.GroupLimitsInfo {
		t.Helper()
		info, err := in.GroupLimits(ctx, "mail", group)
		if err != nil {
			t.Fatal(err)
		}
		return info
	}
	submit := func(f url.Values) string {
		t.Helper()
		resp, _ := r.post(c, "/ui/act/group-limits", f)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("POST group-limits answered %d", resp.StatusCode)
		}
		_, body := r.get(c, resp.Header.Get("Location"))
		return html.UnescapeString(body)
	}
	const page = "/ui/queues/mail"

	f, body := r.formByID(c, page, "group-defaults")
	if f == nil {
		t.Fatal("the signed-in queue page has no group defaults form")
	}
	if strings.Contains(body, `id="group-limits"`) {
		t.Error("a queue without group limits mentions them in its facts line")
	}
	if f.Get("max_running") != "" || f.Get("rate") != "" || f.Get("ordered") != "no" {
		t.Errorf("the group defaults form does not start from none: %v", f)
	}
	f.Set("max_running", "2")
	f.Set("rate", "10")
	f.Set("per", "1s")
	body = submit(f)
	if got := read("").Defaults; got != (broker.GroupLimits{MaxRunning: 2, Rate: 10, Per: time.Second}) {
		t.Fatalf("the group defaults after the form: %+v", got)
	}
	if !strings.Contains(body, "Group defaults of mail set: each group at most 2 running, at most 10 starts per 1s (were: no limits).") {
		t.Errorf("the page after the form does not say what the group defaults are now:\n%s", body)
	}
	if !strings.Contains(body, "group limits: <span id=\"group-limits\">each group: at most 2 running, at most 10 starts per 1s</span>") {
		t.Error("the queue page's facts do not show the group defaults")
	}

	// Another operator changes max running meanwhile; a form that changed
	// only ordered keeps theirs.
	f, _ = r.formByID(c, page, "group-defaults")
	if f.Get("max_running") != "2" || f.Get("per") != "1s" {
		t.Fatalf("the group defaults form does not start from the defaults: %v", f)
	}
	if _, err := in.ChangeGroupLimits(ctx, "mail", "", broker.GroupLimitsChange{To: broker.GroupLimits{MaxRunning: 4}, MaxRunning: true}); err != nil {
		t.Fatal(err)
	}
	f.Set("ordered", "yes")
	submit(f)
	if got := read("").Defaults; got != (broker.GroupLimits{MaxRunning: 4, Rate: 10, Per: time.Second, Ordered: true}) {
		t.Fatalf("changing ordered made the group defaults %+v; want the other operator's max running 4 kept", got)
	}

	// One group: looked up by name, then its own limits.
	if f, _ := r.formByID(c, page, "group-override"); f != nil {
		t.Error("the page offers a group's form before a group was named")
	}
	look, _ := r.formByID(c, page, "group-lookup")
	if look == nil {
		t.Fatal("no form to look up a group")
	}
	f, body = r.formByID(c, page+"?"+url.Values{"state": {look.Get("state")}, "limits_group": {"acme"}}.Encode(), "group-override")
	if f == nil {
		t.Fatal("the page of a named group has no form for its limits")
	}
	if !strings.Contains(html.UnescapeString(body), "Group <b class=\"name\">acme</b>: ordered (one at a time), at most 10 starts per 1s (no limits of its own: the defaults)") {
		t.Error("the page does not say the named group's limits")
	}
	if f.Get("group") != "acme" || f.Get("max_running") != "" || f.Get("ordered") != "default" {
		t.Fatalf("the group's form does not start from its (absent) override: %v", f)
	}
	f.Set("max_running", "5")
	f.Set("ordered", "no")
	body = submit(f)
	info := read("acme")
	if info.Override == nil || info.Effective != (broker.GroupLimits{MaxRunning: 5, Rate: 10, Per: time.Second}) {
		t.Fatalf("acme's limits after its form: %+v", info)
	}
	if !strings.Contains(body, "Group acme of mail set: at most 5 running, at most 10 starts per 1s; its own: at most 5 running, not ordered; the rest from the defaults. It was: ordered (one at a time), at most 10 starts per 1s.") {
		t.Errorf("the page after the group's form does not say what its limits are now:\n%s", body)
	}
	if !strings.Contains(body, `id="group-override"`) {
		t.Error("the group's form does not return to the page showing the group")
	}
	f, _ = r.formByID(c, page+"?limits_group=acme", "group-override")
	if f.Get("max_running") != "5" || f.Get("ordered") != "no" || f.Get("rate") != "" {
		t.Fatalf("the group's form does not start from its override: %v", f)
	}
	f.Set("rate", "0")
	f.Set("max_running", "default")
	submit(f)
	if info := read("acme"); info.Effective != (broker.GroupLimits{MaxRunning: 4}) {
		t.Fatalf("rate 0 and max running default made acme's limits %+v", info.Effective)
	}
	f, _ = r.formByID(c, page+"?limits_group=acme", "group-override")
	f.Set("reset", "1")
	body = submit(f)
	if info := read("acme"); info.Override != nil {
		t.Fatalf("acme has an override after a reset: %+v", info.Override)
	}
	if !strings.Contains(body, "(no limits of its own: the defaults)") {
		t.Error("the page after a reset does not say the group takes the defaults")
	}

	// Refusals change nothing and say why.
	before := read("acme")
	df, _ := r.formByID(c, page, "group-defaults")
	csrf := df.Get("csrf")
	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"scope": {"defaults"}, "max_running": {"many"}}, `max running per group "many" is not a whole number`},
		{url.Values{"scope": {"defaults"}, "max_running": {"default"}}, `is not a whole number`},
		{url.Values{"scope": {"defaults"}, "rate": {"5000"}}, "less than 1ms apart"},
		{url.Values{"scope": {"defaults"}, "per": {"soon"}}, `period "soon" is not a duration`},
		{url.Values{"scope": {"defaults"}, "ordered": {"maybe"}}, `ordered "maybe" is neither yes nor no`},
		{url.Values{"scope": {"defaults"}}, "no field was changed"},
		{url.Values{"scope": {"group"}, "group": {""}, "max_running": {"1"}}, "name the group"},
		{url.Values{"scope": {"group"}, "group": {strings.Repeat("g", 200)}, "max_running": {"1"}}, "at most 128 are allowed"},
		{url.Values{"scope": {"group"}, "group": {"acme"}, "max_running": {"-1"}}, "is not a whole number"},
		{url.Values{"scope": {"group"}, "group": {"acme"}, "rate": {"20000"}}, "Group acme of mail unchanged: rate: spaces a group's starts less than 1ms apart"},
	} {
		tc.form.Set("csrf", csrf)
		tc.form.Set("queue", "mail")
		tc.form.Set("next", page)
		if body := submit(tc.form); !strings.Contains(body, tc.want) {
			t.Errorf("a form of %v does not say %q", tc.form, tc.want)
		}
		if after := read("acme"); after.Effective != before.Effective || after.Override != nil || after.Defaults != before.Defaults {
			t.Fatalf("a refused form of %v changed the group limits: %+v", tc.form, after)
		}
	}
	if !strings.Contains(r.logs.String(), "action=group-limits") {
		t.Error("the group limits actions are not logged")
	}
}
