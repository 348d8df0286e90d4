package dashboard_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// TestActionMessageFitsACookie: an action's outcome travels to the next
// page in the flash cookie, and a browser keeps no cookie whose name and
// value pass 4096 bytes (RFC 6265's least a browser must keep; Chrome and
// Firefox keep no more), and a proxy refuses a response header that big
// (nginx: "upstream sent too big header", 502). So an outcome that
// echoes what the user typed, a long value pasted into the limits form or
// the retry-dead count, must still fit: else the user sees no message at
// all, or an error from the proxy.
func TestActionMessageFitsACookie(t *testing.T) {
	r := setup(t, token)
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	c := r.client()
	csrf := r.signIn(c)
	long := strings.Repeat("9", 20000)
	for _, tc := range []struct {
		act  string
		form url.Values
	}{
		{"limits", url.Values{"max_running": {long}}},
		{"limits", url.Values{"rate": {"5"}, "per": {long + "s"}}},
		{"retry-dead", url.Values{"limit": {long + "x"}}},
	} {
		tc.form.Set("csrf", csrf)
		tc.form.Set("queue", "mail")
		tc.form.Set("next", "/ui/queues/mail")
		resp, _ := r.post(c, "/ui/act/"+tc.act, tc.form)
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("POST /ui/act/%s answered %d", tc.act, resp.StatusCode)
		}
		for _, ck := range resp.Cookies() {
			if ck.Name == "fenceq_ui_flash" && len(ck.Name)+len(ck.Value) > 4096 {
				t.Errorf("POST /ui/act/%s with a %d-byte value sets a flash cookie of %d bytes; a browser keeps at most 4096, so its message is never shown", tc.act, len(long), len(ck.Name)+len(ck.Value))
			}
		}
	}
}
