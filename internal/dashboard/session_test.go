package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// sessionCookie is c's session cookie as a Cookie header, "" for none.
func (r *rig) sessionCookie(c *http.Client) string {
	r.t.Helper()
	u, _ := url.Parse(r.srv.URL + "/ui/")
	for _, ck := range c.Jar.Cookies(u) {
		if ck.Name == "fenceq_ui_session" {
			return ck.Name + "=" + ck.Value
		}
	}
	return ""
}

// TestSignInAgainEndsTheEarlierSession: a browser that signs in again
// while signed in gets a new session cookie in place of its old one, so
// nobody legitimately holds the old one any more. Signing out of that
// browser must leave no copy of either cookie acting; a copy of the first
// one taken before the second sign-in must not outlive the sign-out.
func TestSignInAgainEndsTheEarlierSession(t *testing.T) {
	r := setup(t, token)
	r.deadJob("mail", broker.Job{Kind: "send", ID: "d1"}, "x")
	c := r.client()
	csrf1 := r.signIn(c)
	first := r.sessionCookie(c)
	csrf2 := r.signIn(c) // the same browser signs in again
	if second := r.sessionCookie(c); second == "" || second == first {
		t.Fatalf("the second sign-in left the session cookie %q (was %q)", second, first)
	}
	if resp, _ := r.post(c, "/ui/logout", url.Values{"csrf": {csrf2}}); resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("sign-out answered %d", resp.StatusCode)
	}
	pause := url.Values{"csrf": {csrf1}, "queue": {"mail"}, "next": {"/ui/"}}
	if code := replay(t, r.srv.URL, "/ui/act/pause", first, pause); code != http.StatusForbidden {
		t.Errorf("after the browser signed out, a copy of its first session's cookie paused the queue: %d, want 403", code)
	}
	if paused, err := r.b.Inspector().Paused(context.Background(), "mail"); err != nil || paused {
		t.Errorf("the queue is paused=%v (%v): a session the browser replaced still acts after its sign-out", paused, err)
	}
	for _, k := range r.mr.Keys() {
		if strings.Contains(k, ":session:") {
			t.Errorf("after the browser signed out, the session key %s is still in Redis", k)
		}
	}
}
