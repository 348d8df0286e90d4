package dashboard

import (
	"bytes"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// Mount is the path the dashboard is served under.
const Mount = "/ui/"

// requestTimeout bounds the Redis work of one request.
const requestTimeout = 5 * time.Second

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures a Server.
type Config struct {
	// Inspector is how the dashboard reads and acts on Redis: the
	// operator's view, never the lease protocol. Required.
	Inspector *broker.Inspector
	// Token is the admin token that signs a user in to act, at least
	// TokenMinBytes long. Empty: the dashboard is read-only for everyone.
	Token string
	// Logger receives one line per action taken or refused. Default
	// slog.Default().
	Logger *slog.Logger
	// AllowedHosts are the Host headers the dashboard answers beside its
	// defaults (host.go): the address a request arrived on, and localhost,
	// 127.0.0.1 and [::1] on that port. An entry "name" allows the name on
	// any port, "name:port" on that port only, and "*" every host (no
	// check: for a proxy that checks the host itself). Default none.
	AllowedHosts []string
	// SecureCookie marks the session and flash cookies Secure, so that a
	// browser sends them over HTTPS only: set it when a proxy in front
	// terminates TLS and the dashboard itself is reached over plain HTTP.
	// The dashboard marks them Secure by itself only on a TLS connection.
	// Default false.
	SecureCookie bool
	// ClientAddrHeader names the header a proxy in front writes the
	// client's address into (X-Forwarded-For, X-Real-IP): the sign-in rate
	// limit (SignInBurst wrong tokens per address, then one each
	// SignInEvery) counts against the last address in it, the one the
	// proxy nearest the dashboard wrote. Set it only when every request
	// comes through such a proxy: otherwise a client writes any address it
	// likes there. Empty (the default): the connection's peer address, so
	// behind a proxy every client shares the proxy's.
	ClientAddrHeader string
}

// Server is the dashboard, an http.Handler for the paths under Mount.
type Server struct {
	in    *broker.Inspector
	log   *slog.Logger
	auth  *auth // nil when read-only
	hosts hosts
	pages map[string]*template.Template
	mux   *http.ServeMux

	wrongTokens    everySecond      // wrong sign-ins, logged at most once a second
	limitedSignIns everySecond      // sign-ins refused by the rate limit, likewise
	signIns        *signInLimiter   // wrong sign-ins per client address
	addrHeader     string           // Config.ClientAddrHeader
	secureCookie   bool             // Config.SecureCookie
	now            func() time.Time // time.Now; a test's clock
}

// headerName is what an HTTP header's name may be (RFC 9110's token).
var headerName = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,64}$")

// TokenMinBytes is the shortest admin token the dashboard accepts: a
// token anyone could guess in a few tries would sign them in.
const TokenMinBytes = 16

// CheckToken refuses an admin token shorter than TokenMinBytes, saying how
// to make one (it never repeats the token). Empty is no token: read-only.
func CheckToken(token string) error {
	if token != "" && len(token) < TokenMinBytes {
		return fmt.Errorf("dashboard: the admin token is %d bytes, too short to keep a guesser out: give one of at least %d bytes, made at random, e.g. the output of `openssl rand -hex 16`", len(token), TokenMinBytes)
	}
	return nil
}

// New builds the dashboard. A token shorter than TokenMinBytes is an
// error (CheckToken).
func New(cfg Config) (*Server, error) {
	if cfg.Inspector == nil {
		return nil, errors.New("dashboard: Config.Inspector is required")
	}
	if err := CheckToken(cfg.Token); err != nil {
		return nil, err
	}
	if h := cfg.ClientAddrHeader; h != "" && !headerName.MatchString(h) {
		return nil, fmt.Errorf("dashboard: the client address header %q is not a header name: give one such as X-Forwarded-For or X-Real-IP, or none to count the connection's address", cut(h, echoMax))
	}
	s := &Server{in: cfg.Inspector, log: cfg.Logger, now: time.Now, signIns: newSignInLimiter(),
		addrHeader: cfg.ClientAddrHeader, secureCookie: cfg.SecureCookie}
	if s.log == nil {
		s.log = slog.Default()
	}
	if cfg.Token != "" {
		s.auth = newAuth(cfg.Token)
	}
	var err error
	if s.hosts, err = newHosts(cfg.AllowedHosts); err != nil {
		return nil, err
	}
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

func (s *Server) routes() {
	m := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	m.Handle("GET /ui/static/", http.StripPrefix("/ui/static/", cacheFor(time.Hour, http.FileServerFS(static))))
	m.HandleFunc("GET /ui/{$}", s.overview)
	m.HandleFunc("GET /ui/live", s.live)
	m.HandleFunc("GET /ui/workers", s.workers)
	m.HandleFunc("GET /ui/queues/{queue}", s.queue)
	m.HandleFunc("GET /ui/queues/{queue}/leases", s.leases)
	m.HandleFunc("GET /ui/queues/{queue}/groups", s.groups)
	m.HandleFunc("GET /ui/queues/{queue}/jobs/{id}", s.job)
	m.HandleFunc("GET /ui/queues/{queue}/jobs/{id}/release", s.confirmRelease)
	m.HandleFunc("GET /ui/queues/{queue}/jobs/{id}/delete", s.confirmDelete)
	m.HandleFunc("GET /ui/queues/{queue}/purge", s.confirmPurge)
	// Names that a browser would read as a path's "." or ".." segment
	// travel in the query instead (see queueURL).
	m.HandleFunc("GET /ui/schedules", s.schedules)
	m.HandleFunc("GET /ui/schedules/remove", s.confirmScheduleRemove)
	m.HandleFunc("GET /ui/queue", s.queue)
	m.HandleFunc("GET /ui/job", s.job)
	m.HandleFunc("GET /ui/login", s.loginPage)
	m.HandleFunc("POST /ui/login", s.login)
	m.HandleFunc("POST /ui/logout", s.act(s.logout))
	m.HandleFunc("POST /ui/act/retry", s.act(s.retry))
	m.HandleFunc("POST /ui/act/cancel", s.act(s.cancel))
	m.HandleFunc("POST /ui/act/release", s.act(s.release))
	m.HandleFunc("POST /ui/act/delete", s.act(s.deleteJob))
	m.HandleFunc("POST /ui/act/promote", s.act(s.promote))
	m.HandleFunc("POST /ui/act/purge", s.act(s.purge))
	m.HandleFunc("POST /ui/act/bulk", s.bulk)
	m.HandleFunc("POST /ui/act/retry-dead", s.act(s.retryDead))
	m.HandleFunc("POST /ui/act/pause", s.act(s.pause))
	m.HandleFunc("POST /ui/act/resume", s.act(s.resume))
	m.HandleFunc("POST /ui/act/limits", s.act(s.setLimits))
	m.HandleFunc("POST /ui/act/group-limits", s.act(s.setGroupLimits))
	m.HandleFunc("POST /ui/act/schedule-add", s.act(s.scheduleAdd))
	m.HandleFunc("POST /ui/act/schedule-pause", s.act(s.schedulePause))
	m.HandleFunc("POST /ui/act/schedule-resume", s.act(s.scheduleResume))
	m.HandleFunc("POST /ui/act/schedule-remove", s.act(s.scheduleRemove))
	m.HandleFunc("/ui/", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost && (strings.HasPrefix(r.URL.Path, Mount+"act/") || r.URL.Path == Mount+"logout") {
			w.Header().Set("Allow", http.MethodPost)
			s.fail(w, r, http.StatusMethodNotAllowed, "Actions are POST only", "An action is taken only by a form's POST, never by opening a link. Nothing was changed.")
			return
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			s.fail(w, r, http.StatusMethodNotAllowed, "Method not allowed", r.Method+" is not served here: pages answer GET, actions answer POST.")
			return
		}
		s.fail(w, r, http.StatusNotFound, "Not found", "There is no dashboard page at "+r.URL.Path+". Start from the overview.")
	})
	s.mux = m
}

// ServeHTTP serves the dashboard's paths, with headers that keep its pages
// from being framed, sniffed or fed script from elsewhere, to requests
// whose Host it answers.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "same-origin")
	if !s.hostAllowed(w, r) {
		return
	}
	s.mux.ServeHTTP(w, r)
}

// CheckHost serves next only to requests whose Host the dashboard answers
// (Config.AllowedHosts and its defaults), and answers the others 421: for
// what is served beside the dashboard and tells as much (workerd run's
// /metrics names the queues and counts their jobs).
func (s *Server) CheckHost(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s.hostAllowed(w, r) {
			next.ServeHTTP(w, r)
		}
	})
}

// hostAllowed answers whether r's Host is allowed; when it is not, it has
// logged the request and answered it.
func (s *Server) hostAllowed(w http.ResponseWriter, r *http.Request) bool {
	if s.hosts.allows(r) {
		return true
	}
	s.log.Warn("dashboard: request refused: Host not allowed", slog.String("remote", r.RemoteAddr), logged("host", r.Host), logged("path", r.URL.Path))
	misdirected(w, r)
	return false
}

func cacheFor(d time.Duration, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", fmt.Sprintf("public, max-age=%d", int(d.Seconds())))
		next.ServeHTTP(w, r)
	})
}

// page is what every template gets.
type page struct {
	Title   string
	Queue   string // the queue the page is about, for the navigation
	Session session
	Flash   string
	Live    string // the page's live-update URL, "" for none (live.go)
	Data    any
}

// session is the viewer's standing, as the templates need it.
type session struct {
	ReadOnly bool   // no admin token configured
	SignedIn bool   // may act
	CSRF     string // the token every form carries
	Next     string // where the sign-in form returns to
}

func (s *Server) render(w http.ResponseWriter, r *http.Request, status int, name string, p page) {
	p.Session = s.sessionOf(r)
	if p.Flash == "" {
		p.Flash = s.takeFlash(w, r)
	}
	var buf bytes.Buffer
	if err := s.pages[name].ExecuteTemplate(&buf, "layout", p); err != nil {
		s.log.Error("dashboard: render page", slog.String("page", name), slog.Any("error", err))
		http.Error(w, "the dashboard could not render this page: "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// problem is the error page's data.
type problem struct {
	Status  int
	Message string
}

// fail answers an error page that says what was wrong and what to do.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, status int, title, msg string) {
	s.render(w, r, status, "error", page{Title: title, Data: problem{Status: status, Message: msg}})
}

// failErr answers the error page for a broker error: 404 for a job that
// does not exist, 400 for a name the broker refuses, else 502 (Redis).
func (s *Server) failErr(w http.ResponseWriter, r *http.Request, what string, err error) {
	var ve *broker.ValidationError
	switch {
	case errors.Is(err, broker.ErrJobNotFound):
		s.fail(w, r, http.StatusNotFound, "Job not found", err.Error()+". It may never have existed, or retention deleted it after it finished.")
	case errors.As(err, &ve):
		s.fail(w, r, http.StatusBadRequest, "Bad request", err.Error())
	case errors.Is(err, broker.ErrCorruptJob):
		s.fail(w, r, http.StatusInternalServerError, "Corrupt job", err.Error()+". Its hash was edited by hand or written by another program; the next script that meets it in an index marks it dead with this reason. Run workerd check to see every such job.")
	case errors.Is(err, context.DeadlineExceeded):
		s.fail(w, r, http.StatusGatewayTimeout, "Redis is slow", what+": Redis did not answer within "+requestTimeout.String()+". Reload to try again.")
	default:
		s.fail(w, r, http.StatusBadGateway, "Redis error", what+": "+err.Error())
	}
}

func reqCtx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), requestTimeout)
}

// queueParam is the queue a request names, in its path or, for a name a
// path cannot carry, its query.
func queueParam(r *http.Request) string {
	if q := r.PathValue("queue"); q != "" {
		return q
	}
	return r.URL.Query().Get("queue")
}

func idParam(r *http.Request) string {
	if id := r.PathValue("id"); id != "" {
		return id
	}
	return r.URL.Query().Get("id")
}

// knownQueue answers whether queue is one of the deployment's queues, and
// otherwise answers 404 itself.
func (s *Server) knownQueue(ctx context.Context, w http.ResponseWriter, r *http.Request, queue string) bool {
	ok, err := s.queueExists(ctx, queue)
	switch {
	case err != nil:
		s.failErr(w, r, "list queues", err)
	case !ok && queue == "":
		s.fail(w, r, http.StatusNotFound, "No queue named", "Name a queue: /ui/queues/NAME.")
	case !ok:
		s.fail(w, r, http.StatusNotFound, "Queue not found", s.unknownQueueText(queue))
	}
	return ok
}

// queueExists answers whether queue is one of the deployment's queues. No
// request about any other name reaches the broker, so none can make it
// keep anything (or Redis store anything) for a name made up outside.
func (s *Server) queueExists(ctx context.Context, queue string) (bool, error) {
	if queue == "" {
		return false, nil
	}
	ok, err := s.in.QueueExists(ctx, queue)
	if ve := (*broker.ValidationError)(nil); errors.As(err, &ve) {
		return false, nil // a name no queue can have
	}
	return ok, err
}

func (s *Server) unknownQueueText(queue string) string {
	return fmt.Sprintf("No queue named %q has ever had a job enqueued under this key prefix (%q). Check the name, or the --prefix workerd was started with.", queue, s.in.Prefix())
}

// segment escapes a name for one path segment. A name a browser would take
// for a "." or ".." segment cannot be carried in a path at all.
func segment(name string) (string, bool) {
	if strings.Trim(name, ".") == "" {
		return "", false
	}
	return url.PathEscape(name), true
}

func queueURL(queue string) string {
	if seg, ok := segment(queue); ok {
		return Mount + "queues/" + seg
	}
	return Mount + "queue?" + url.Values{"queue": {queue}}.Encode()
}

func leasesURL(queue string) string {
	if seg, ok := segment(queue); ok {
		return Mount + "queues/" + seg + "/leases"
	}
	return queueURL(queue) + "&view=leases"
}

func jobURL(queue, id string) string {
	qs, ok1 := segment(queue)
	is, ok2 := segment(id)
	if ok1 && ok2 {
		return Mount + "queues/" + qs + "/jobs/" + is
	}
	return Mount + "job?" + url.Values{"queue": {queue}, "id": {id}}.Encode()
}

func releaseURL(queue, id string) string {
	qs, ok1 := segment(queue)
	is, ok2 := segment(id)
	if ok1 && ok2 {
		return Mount + "queues/" + qs + "/jobs/" + is + "/release"
	}
	return Mount + "job?" + url.Values{"queue": {queue}, "id": {id}, "view": {"release"}}.Encode()
}

func deleteURL(queue, id string) string {
	qs, ok1 := segment(queue)
	is, ok2 := segment(id)
	if ok1 && ok2 {
		return Mount + "queues/" + qs + "/jobs/" + is + "/delete"
	}
	return Mount + "job?" + url.Values{"queue": {queue}, "id": {id}, "view": {"delete"}}.Encode()
}

func purgeURL(queue string, st broker.State) string {
	if seg, ok := segment(queue); ok {
		return Mount + "queues/" + seg + "/purge?" + url.Values{"state": {string(st)}}.Encode()
	}
	return Mount + "queue?" + url.Values{"queue": {queue}, "state": {string(st)}, "view": {"purge"}}.Encode()
}

// localPath accepts a return address only when it is a path of this
// dashboard, so that no form can send a user elsewhere.
func localPath(p string) string {
	u, err := url.Parse(p)
	if err != nil || u.Scheme != "" || u.Host != "" || u.User != nil || !strings.HasPrefix(u.Path, Mount) || strings.HasPrefix(p, "//") || strings.Contains(p, "\\") {
		return Mount
	}
	return u.RequestURI()
}
