package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fenceq/fenceq/broker"
)

const (
	sessionCookie = "fenceq_ui_session"
	flashCookie   = "fenceq_ui_flash"
	// sessionLife is how long a sign-in lasts.
	sessionLife = 12 * time.Hour
)

// auth signs sessions in with the admin token. The cookie holds a session
// id, its expiry and an HMAC of both, never the token: the key is derived
// from the token, so changing the token signs everyone out. The session
// also lives in Redis (broker.StartSession) until it expires or its user
// signs out, on whichever process: a cookie counts only while it does.
type auth struct {
	tokenSum [sha256.Size]byte // compared in constant time, whatever the lengths
	key      []byte
}

func newAuth(token string) *auth {
	mac := hmac.New(sha256.New, []byte(token))
	mac.Write([]byte("fenceq dashboard session key"))
	return &auth{tokenSum: sha256.Sum256([]byte(token)), key: mac.Sum(nil)}
}

func (a *auth) sign(parts ...string) string {
	mac := hmac.New(sha256.New, a.key)
	mac.Write([]byte(strings.Join(parts, "\x00")))
	return base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func (a *auth) tokenOK(t string) bool {
	sum := sha256.Sum256([]byte(t))
	return subtle.ConstantTimeCompare(sum[:], a.tokenSum[:]) == 1
}

// newSession answers a new session's id and its signed cookie value.
func (a *auth) newSession(now time.Time) (id, cookie string) {
	var b [16]byte
	_, _ = rand.Read(b[:])
	id, exp := hex.EncodeToString(b[:]), strconv.FormatInt(now.Add(sessionLife).Unix(), 10)
	return id, id + "." + exp + "." + a.sign("session", id, exp)
}

// sessionID answers the id of a valid, unexpired session cookie value.
func (a *auth) sessionID(v string, now time.Time) (string, bool) {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return "", false
	}
	if !hmac.Equal([]byte(parts[2]), []byte(a.sign("session", parts[0], parts[1]))) {
		return "", false
	}
	exp, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil || now.Unix() >= exp {
		return "", false
	}
	return parts[0], true
}

// csrf is the token a session's forms carry: an HMAC of the session id.
func (a *auth) csrf(sessionID string) string { return a.sign("csrf", sessionID) }

// signedIn answers the id of the request's session when it is signed in:
// its cookie is one this dashboard's token signed, unexpired, and the
// session is still active in Redis (no sign-out ended it). An error is
// Redis's, and then the request is not signed in either.
func (s *Server) signedIn(r *http.Request) (string, bool, error) {
	c, err := r.Cookie(sessionCookie)
	if err != nil {
		return "", false, nil
	}
	id, ok := s.auth.sessionID(c.Value, time.Now())
	if !ok {
		return "", false, nil
	}
	ctx, cancel := reqCtx(r)
	defer cancel()
	ok, err = s.in.SessionActive(ctx, id)
	return id, ok && err == nil, err
}

// sessionOf is the viewer's standing.
func (s *Server) sessionOf(r *http.Request) session {
	if s.auth == nil {
		return session{ReadOnly: true}
	}
	next := r.URL.RequestURI()
	if r.Method != http.MethodGet {
		next = Mount
	}
	id, ok, err := s.signedIn(r)
	if err != nil {
		s.log.Warn("dashboard: could not check a session: shown as signed out", slog.String("remote", r.RemoteAddr), slog.Any("error", err))
	}
	if !ok {
		return session{Next: next}
	}
	return session{SignedIn: true, CSRF: s.auth.csrf(id), Next: next}
}

func (s *Server) loginPage(w http.ResponseWriter, r *http.Request) {
	if s.auth == nil {
		s.fail(w, r, http.StatusNotFound, "Read-only dashboard", readOnlyText)
		return
	}
	s.render(w, r, http.StatusOK, "login", page{Title: "Sign in", Data: localPath(r.URL.Query().Get("next"))})
}

const readOnlyText = "This dashboard is read-only: it was started without an admin token, so there is nothing to sign in to. Start it with --ui-token (or FENCEQ_UI_TOKEN; ui_token in workerd run's config) to allow actions."

func (s *Server) login(w http.ResponseWriter, r *http.Request) {
	if s.auth == nil {
		s.refuse(w, r, "login", "", "", readOnlyText)
		return
	}
	if !sameOrigin(r) {
		s.refuse(w, r, "login", "", "", "The sign-in came from another site's page; sign in from this dashboard.")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	addr := clientAddr(r, s.addrHeader)
	if wait := s.signIns.try(addr, s.now()); wait > 0 {
		if n, ok := s.limitedSignIns.add(s.now()); ok {
			s.log.Warn("dashboard: sign-in refused: too many wrong tokens from the client's address", slog.String("remote", r.RemoteAddr),
				logged("client", addr), slog.Int("count", n))
		}
		w.Header().Set("Retry-After", strconv.Itoa(int(wait.Seconds())))
		s.render(w, r, http.StatusTooManyRequests, "login", page{Title: "Sign in",
			Flash: fmt.Sprintf("Too many wrong admin tokens from your address (%s): wait %s, then sign in again. The token was not checked; nothing was changed.", cut(addr, echoMax), wait),
			Data:  localPath(r.PostFormValue("next"))})
		return
	}
	if !s.auth.tokenOK(r.PostFormValue("token")) {
		if n, ok := s.wrongTokens.add(s.now()); ok {
			// At most a line a second: count is the wrong sign-ins since the
			// last line, this one (whose remote it names) included.
			s.log.Warn("dashboard: sign-in refused: wrong token", slog.String("remote", r.RemoteAddr), logged("client", addr), slog.Int("count", n))
		}
		s.render(w, r, http.StatusForbidden, "login", page{Title: "Sign in", Flash: "That is not the admin token. Nothing was changed.", Data: localPath(r.PostFormValue("next"))})
		return
	}
	// A browser signing in again gets a new session in place of its old
	// one, which nobody then holds legitimately: it ends here, so that no
	// copy of its cookie outlives the new session's sign-out.
	old, signedIn, err := s.signedIn(r)
	ctx, cancel := reqCtx(r)
	defer cancel()
	if err == nil && signedIn {
		err = s.in.EndSession(ctx, old)
	}
	if err != nil {
		s.failErr(w, r, "sign in (end the earlier session, kept in Redis)", err)
		return
	}
	id, cookie := s.auth.newSession(time.Now())
	if err := s.in.StartSession(ctx, id, sessionLife); err != nil {
		s.failErr(w, r, "sign in (the session is kept in Redis)", err)
		return
	}
	s.setCookie(w, r, sessionCookie, cookie, int(sessionLife.Seconds()))
	s.signIns.succeeded(addr)
	s.log.Info("dashboard: signed in", slog.String("remote", r.RemoteAddr), slog.String("client", addr))
	s.setFlash(w, r, "Signed in: actions are enabled.")
	http.Redirect(w, r, localPath(r.PostFormValue("next")), http.StatusSeeOther)
}

// logout ends the session in Redis, so that no copy of its cookie acts
// again on any process, then drops the browser's cookie.
func (s *Server) logout(w http.ResponseWriter, r *http.Request) (string, string, string) {
	id, ok, err := s.signedIn(r)
	if ok {
		ctx, cancel := reqCtx(r)
		err = s.in.EndSession(ctx, id)
		cancel()
	}
	if err != nil {
		return "", "", "Not signed out: the session could not be ended in Redis (" + err.Error() + "). Sign out again."
	}
	s.setCookie(w, r, sessionCookie, "", -1)
	return "", "", "Signed out."
}

// everySecond counts events that are logged at most once a second, so
// that a flood of them (wrong sign-ins, thousands a second) writes one
// line a second with their count, not a line each.
type everySecond struct {
	mu   sync.Mutex
	last time.Time // when a line was last logged
	n    int       // events since
}

// add counts one event at now, and answers whether to log a line now and
// the count it reports: the events since the last line, this one included.
func (e *everySecond) add(now time.Time) (int, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if !e.last.IsZero() && now.Sub(e.last) < time.Second {
		return 0, false
	}
	n := e.n
	e.n, e.last = 0, now
	return n, true
}

// sameOrigin rejects a POST that a browser says came from another origin.
// (SameSite=Strict already keeps the session cookie off such a request;
// this also covers the sign-in form, which has no session yet.)
func sameOrigin(r *http.Request) bool {
	if site := r.Header.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return false
	}
	o := r.Header.Get("Origin")
	if o == "" || o == "null" && r.Header.Get("Sec-Fetch-Site") == "" {
		return true // not a browser that says; the CSRF token still decides
	}
	u, err := url.Parse(o)
	return err == nil && u.Host == r.Host
}

// action is one POST handler: it does the work and answers the queue and
// job it acted on (for the log) and the message to show.
type action func(w http.ResponseWriter, r *http.Request) (queue, id, outcome string)

// act checks that the POST comes from a signed-in session's own form, runs
// the action, logs it, and sends the user back with its outcome.
func (s *Server) act(do action) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := s.allowed(w, r)
		if !ok {
			return
		}
		queue, id, outcome := do(w, r)
		s.acted(w, r, name, queue, id, outcome)
	}
}

// formMax bounds an action's form; bulkFormMax a bulk action's from a
// client with a signed session cookie: broker.PageLimitMax ids of the
// longest, every byte escaped, and the other fields.
const (
	formMax     = 64 << 10
	bulkFormMax = broker.PageLimitMax*(len("&id=")+3*1024) + formMax
)

// allowed reads an action's form and answers the action's name and
// whether the request may act: a signed-in session, a request from the
// dashboard's own pages with the session's CSRF token, on a queue that
// exists (but for signing out and the schedules, which belong to no
// queue). When it may not, it has answered the request (and changed
// nothing).
func (s *Server) allowed(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := strings.TrimPrefix(strings.TrimPrefix(r.URL.Path, Mount), "act/")
	limit := int64(formMax)
	if name == "bulk" && s.auth != nil {
		// A page's worth of ids may need more, and only a client with
		// a session cookie we signed may send that much (checked by
		// its signature here, in Redis below).
		if c, err := r.Cookie(sessionCookie); err == nil {
			if _, ok := s.auth.sessionID(c.Value, time.Now()); ok {
				limit = int64(bulkFormMax)
			}
		}
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if err := r.ParseForm(); err != nil {
		var mbe *http.MaxBytesError
		switch {
		case strings.Contains(err.Error(), "query parameters exceeded"):
			// net/url's bound on a form's fields (10,000; GODEBUG
			// urlmaxqueryparams), not an exported error.
			s.refuse(w, r, name, "", "", fmt.Sprintf("The form has more fields than an action takes: select fewer jobs (at most %d at a time).", broker.PageLimitMax))
			return name, false
		case errors.As(err, &mbe):
			s.refuse(w, r, name, "", "", fmt.Sprintf("The form is over %d KiB, the most an action takes: select fewer jobs (at most %d at a time).", limit>>10, broker.PageLimitMax))
			return name, false
		}
		s.refuse(w, r, name, "", "", "The form could not be read: "+err.Error())
		return name, false
	}
	queue, id := r.PostForm.Get("queue"), r.PostForm.Get("id")
	if s.auth == nil {
		s.refuse(w, r, name, queue, id, readOnlyText)
		return name, false
	}
	sid, signedIn, err := s.signedIn(r)
	switch {
	case err != nil:
		s.failErr(w, r, "check your sign-in (sessions are kept in Redis)", err)
		return name, false
	case !signedIn:
		s.refuse(w, r, name, queue, id, "You are not signed in (or your sign-in expired). Sign in with the admin token, then try again.")
		return name, false
	case !sameOrigin(r):
		s.refuse(w, r, name, queue, id, "The request came from another site's page. Use the dashboard's own buttons.")
		return name, false
	case !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(s.auth.csrf(sid))):
		s.refuse(w, r, name, queue, id, "The form's CSRF token is missing or wrong (the page may be from an earlier sign-in). Reload the page and try again.")
		return name, false
	}
	if name != "logout" && !strings.HasPrefix(name, "schedule-") { // a schedule belongs to no queue
		ctx, cancel := reqCtx(r)
		ok, err := s.queueExists(ctx, queue)
		cancel()
		switch {
		case err != nil:
			s.failErr(w, r, "list queues", err)
			return name, false
		case !ok:
			s.log.Warn("dashboard: action refused", slog.String("remote", r.RemoteAddr), slog.String("action", name),
				logged("queue", queue), logged("id", id), slog.String("reason", "unknown queue"))
			s.fail(w, r, http.StatusNotFound, "Queue not found", s.unknownQueueText(queue)+" Nothing was changed.")
			return name, false
		}
	}
	return name, true
}

// acted logs an action's outcome, shows it on the next page, and sends the
// browser to the form's next page.
func (s *Server) acted(w http.ResponseWriter, r *http.Request, name, queue, id, outcome string) {
	s.log.Info("dashboard: action", slog.String("remote", r.RemoteAddr), slog.String("action", name),
		logged("queue", queue), logged("id", id), slog.String("outcome", cut(outcome, flashMax)))
	s.setFlash(w, r, outcome)
	http.Redirect(w, r, localPath(r.PostForm.Get("next")), http.StatusSeeOther)
}

// refuse answers 403 to an action, logs it, and changes nothing.
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, name, queue, id, why string) {
	s.log.Warn("dashboard: action refused", slog.String("remote", r.RemoteAddr), slog.String("action", name),
		logged("queue", queue), logged("id", id), slog.String("reason", why))
	s.fail(w, r, http.StatusForbidden, "Action refused", why+" Nothing was changed.")
}

// flashMax bounds a message the flash cookie carries: base64 and the
// signature make a cookie of about 2.8 KB, under the 4096 bytes a browser
// keeps at most (and a proxy's header limit).
const flashMax = 2000

// setFlash leaves a message for the next page, signed so that no one else
// can put words there, cut to flashMax bytes.
func (s *Server) setFlash(w http.ResponseWriter, r *http.Request, msg string) {
	if s.auth == nil || msg == "" {
		return
	}
	v := base64.RawURLEncoding.EncodeToString([]byte(cut(msg, flashMax)))
	s.setCookie(w, r, flashCookie, v+"."+s.auth.sign("flash", v), 60)
}

// setCookie sets one of the dashboard's cookies (maxAge -1 deletes it):
// for its paths only, out of scripts' reach, never sent along from
// another site, and Secure when the dashboard serves TLS or
// Config.SecureCookie says a proxy in front does.
func (s *Server) setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: value, Path: Mount, MaxAge: maxAge,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: s.secureCookie || r.TLS != nil})
}

func (s *Server) takeFlash(w http.ResponseWriter, r *http.Request) string {
	c, err := r.Cookie(flashCookie)
	if err != nil || s.auth == nil {
		return ""
	}
	s.setCookie(w, r, flashCookie, "", -1)
	v, mac, ok := strings.Cut(c.Value, ".")
	if !ok || !hmac.Equal([]byte(mac), []byte(s.auth.sign("flash", v))) {
		return ""
	}
	msg, err := base64.RawURLEncoding.DecodeString(v)
	if err != nil {
		return ""
	}
	return string(msg)
}
