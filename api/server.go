package api

import (
	"cmp"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
)

// Mount is the path the API serves under: every route starts with it.
const Mount = "/v1/"

const (
	// MaxBodyBytesDefault is Config.MaxBodyBytes when 0: room for one job
	// whose payload is at the broker's default limit (1 MiB), with its
	// other fields.
	MaxBodyBytesDefault = 2 << 20
	// MaxBatchDefault is Config.MaxBatch when 0.
	MaxBatchDefault = 1000
	// WaitDefault is how long a wait request blocks when it gives no
	// timeout, and MaxWaitDefault Config.MaxWait when 0.
	WaitDefault    = 30 * time.Second
	MaxWaitDefault = 60 * time.Second
	// MaxBlockingWaitsDefault is Config.MaxBlockingWaits when 0, or
	// half the broker's go-redis PoolSize when that is less.
	MaxBlockingWaitsDefault = 8
	// waitPollInterval is how often a wait beyond MaxBlockingWaits reads
	// the job.
	waitPollInterval = 250 * time.Millisecond
	// TokenMinBytes is the shortest token New accepts.
	TokenMinBytes = 16
	// requestTimeout bounds each request's Redis work but a wait's.
	requestTimeout = 10 * time.Second
)

// Config configures the API.
type Config struct {
	// Broker is the connection the API enqueues and reads through.
	// Required.
	Broker *broker.Broker
	// Token is the bearer token every request must carry. Required: at
	// least TokenMinBytes bytes, made at random (openssl rand -hex 32).
	Token string
	// MaxBodyBytes bounds a request's body; a larger one is refused with
	// 413. Default MaxBodyBytesDefault (2 MiB).
	MaxBodyBytes int64
	// MaxBatch bounds the jobs of one batch request; more are refused
	// with 413. Default MaxBatchDefault (1,000).
	MaxBatch int
	// MaxWait bounds a wait request's timeout; a longer one is refused
	// with 400. Default MaxWaitDefault (60s). The server's write timeout
	// is lifted for a wait request, to its timeout and 10 s more.
	MaxWait time.Duration
	// MaxBlockingWaits bounds the waits that block in Redis at once. Each
	// holds a connection of the broker's pool (its go-redis PoolSize) for
	// up to a second at a time, so waits without a bound would starve
	// every other request on that pool, a worker pool's heartbeats
	// included. Beyond the bound, a wait reads the job every
	// waitPollInterval instead (one short HGETALL each), so it answers a
	// little later but holds nothing. Default MaxBlockingWaitsDefault (8),
	// or half the pool's PoolSize (at least 1) when that is less.
	MaxBlockingWaits int
	// Logger receives a line for each answer of status 500 or more.
	// Default slog.Default().
	Logger *slog.Logger
}

// defaultBlockingWaits is MaxBlockingWaitsDefault, or half the broker's
// pool when that is less: the rest of the pool stays free for enqueues and,
// in workerd run, the pools' claims and heartbeats.
func defaultBlockingWaits(poolSize int) int {
	if poolSize <= 0 {
		return MaxBlockingWaitsDefault
	}
	return max(1, min(MaxBlockingWaitsDefault, poolSize/2))
}

// CheckToken says what is wrong with an API token, or answers nil.
func CheckToken(token string) error {
	switch {
	case token == "":
		return errors.New("api: no API token: the API refuses every request without one; set one of at least 16 random bytes, e.g. the output of `openssl rand -hex 32`")
	case len(token) < TokenMinBytes:
		return fmt.Errorf("api: the API token is %d bytes, too short to keep a guesser out: give one of at least %d bytes, made at random, e.g. the output of `openssl rand -hex 32`", len(token), TokenMinBytes)
	case strings.TrimSpace(token) != token || strings.ContainsAny(token, " \t\r\n"):
		return errors.New("api: the API token contains white space, which an Authorization header cannot carry; use letters and digits, e.g. the output of `openssl rand -hex 32`")
	}
	return nil
}

// Server is the API: an http.Handler for the paths under Mount.
type Server struct {
	b        *broker.Broker
	token    [sha256.Size]byte
	maxBody  int64
	maxBatch int
	maxWait  time.Duration
	blocking chan struct{} // a slot per wait that may block in Redis
	batcher  *broker.Batcher
	log      *slog.Logger
	mux      *http.ServeMux
}

// New builds the API. It does not contact Redis.
func New(cfg Config) (*Server, error) {
	if cfg.Broker == nil {
		return nil, errors.New("api: Config.Broker is required")
	}
	if err := CheckToken(cfg.Token); err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes < 0 || cfg.MaxBatch < 0 || cfg.MaxWait < 0 || cfg.MaxBlockingWaits < 0 {
		return nil, errors.New("api: Config.MaxBodyBytes, MaxBatch, MaxWait and MaxBlockingWaits must not be negative (0 means the default)")
	}
	s := &Server{
		b:        cfg.Broker,
		token:    sha256.Sum256([]byte(cfg.Token)),
		maxBody:  cmp.Or(cfg.MaxBodyBytes, MaxBodyBytesDefault),
		maxBatch: cmp.Or(cfg.MaxBatch, MaxBatchDefault),
		maxWait:  cmp.Or(cfg.MaxWait, MaxWaitDefault),
		blocking: make(chan struct{}, cmp.Or(cfg.MaxBlockingWaits, defaultBlockingWaits(cfg.Broker.PoolSize()))),
		log:      cmp.Or(cfg.Logger, slog.Default()),
		mux:      http.NewServeMux(),
	}
	bt, err := broker.NewBatcher(cfg.Broker.Client(), broker.BatcherOptions{})
	if err != nil {
		return nil, err
	}
	s.batcher = bt
	for _, rt := range s.routes() {
		h := rt.handle
		if !rt.public {
			h = s.authorized(h)
		}
		s.mux.HandleFunc(rt.pattern(), h)
	}
	s.mux.HandleFunc(Mount, s.noRoute)
	return s, nil
}

// route is one operation of the API. The OpenAPI document has one
// operation per route (TestOpenAPIMatchesRoutes).
type route struct {
	method, path string
	public       bool // served without the token
	handle       http.HandlerFunc
}

func (rt route) pattern() string { return rt.method + " " + rt.path }

// routes is every operation the API serves.
func (s *Server) routes() []route {
	return []route{
		{method: http.MethodPost, path: "/v1/queues/{queue}/jobs", handle: s.enqueue},
		{method: http.MethodPost, path: "/v1/queues/{queue}/jobs/batch", handle: s.enqueueBatch},
		{method: http.MethodGet, path: "/v1/queues/{queue}/jobs/{id}", handle: s.job},
		{method: http.MethodGet, path: "/v1/queues/{queue}/jobs/{id}/wait", handle: s.wait},
		{method: http.MethodPost, path: "/v1/queues/{queue}/jobs/{id}/cancel", handle: s.cancel},
		{method: http.MethodPost, path: "/v1/queues/{queue}/jobs/{id}/retry", handle: s.retry},
		{method: http.MethodGet, path: "/v1/openapi.json", public: true, handle: serveOpenAPI},
	}
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// authorized lets a request through only with the bearer token. Both
// sides are hashed first, so the comparison takes the same time whatever
// the length of what was sent.
func (s *Server) authorized(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		h := r.Header.Get("Authorization")
		scheme, tok, ok := strings.Cut(h, " ")
		if h == "" || !ok || !strings.EqualFold(scheme, "Bearer") {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fenceq"`)
			writeError(w, http.StatusUnauthorized, apiError{Code: CodeUnauthorized, Field: "Authorization",
				Message: "no bearer token: send the header Authorization: Bearer TOKEN, with the API token workerd was given (api_token, FENCEQ_API_TOKEN or --api-token)"})
			return
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
		if subtle.ConstantTimeCompare(sum[:], s.token[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fenceq", error="invalid_token"`)
			writeError(w, http.StatusUnauthorized, apiError{Code: CodeUnauthorized, Field: "Authorization",
				Message: "the bearer token is not the API token; send the one workerd was given (api_token, FENCEQ_API_TOKEN or --api-token)"})
			return
		}
		next(w, r)
	}
}

// noRoute answers a path under Mount that no route serves: 405 when
// another method would be served there, else 404.
func (s *Server) noRoute(w http.ResponseWriter, r *http.Request) {
	var allow []string
	for _, m := range []string{http.MethodGet, http.MethodPost} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if _, pattern := s.mux.Handler(probe); pattern != Mount && pattern != "" {
			allow = append(allow, m)
		}
	}
	if len(allow) > 0 {
		w.Header().Set("Allow", strings.Join(allow, ", "))
		writeError(w, http.StatusMethodNotAllowed, apiError{Code: CodeMethodNotAllowed,
			Message: fmt.Sprintf("%s %s is not served; use %s (the routes are in /v1/openapi.json)", r.Method, r.URL.Path, strings.Join(allow, " or "))})
		return
	}
	writeError(w, http.StatusNotFound, apiError{Code: CodeNoRoute,
		Message: fmt.Sprintf("no route %s %s; the routes are in /v1/openapi.json", r.Method, r.URL.Path)})
}
