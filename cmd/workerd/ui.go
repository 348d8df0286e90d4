package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/internal/dashboard"
)

const uiDefault = "127.0.0.1:8080"

// runUI serves the dashboard alone, for a deployment whose workers run
// elsewhere (or under another runner).
func runUI(ctx context.Context, e *env, args []string) error {
	const synopsis = "[--redis URL] [--addr 127.0.0.1:8080] [--ui-token TOKEN] [--ui-allowed-hosts NAME,...] [--ui-secure-cookie] [--ui-client-addr-header NAME] [--tls-cert FILE --tls-key FILE]"
	fs := newFlags(e, "ui", synopsis)
	var rf redisFlags
	rf.register(fs)
	var lf logFlags
	lf.register(fs)
	var tf tlsFlags
	tf.register(fs, false)
	addr := fs.String("addr", uiDefault, "address to serve the dashboard on (loopback by default: put it behind a proxy with TLS to share it)")
	token := fs.String("ui-token", "", "admin token that allows actions once signed in (default $FENCEQ_UI_TOKEN; none: read-only)")
	hosts := fs.String("ui-allowed-hosts", "", "host names the dashboard answers to beside its address and localhost, comma-separated: a proxy's or a DNS name (name or name:port; * for any) (default $FENCEQ_UI_ALLOWED_HOSTS)")
	secure := fs.Bool("ui-secure-cookie", false, "mark the sign-in cookies Secure (HTTPS only): for a dashboard behind a proxy that terminates TLS (default $FENCEQ_UI_SECURE_COOKIE)")
	addrHeader := fs.String("ui-client-addr-header", "", "header in which the proxy in front writes the client's address (X-Forwarded-For, X-Real-IP): the sign-in rate limit counts against its last address; set it only behind such a proxy (default $FENCEQ_UI_CLIENT_ADDR_HEADER; none: the connection's address)")
	if _, err := parse(fs, synopsis, args, 0, 0); err != nil {
		return err
	}
	proxy, err := uiProxyOf(e, *secure, *addrHeader)
	if err != nil {
		return err
	}
	log, err := lf.logger(e.stderr)
	if err != nil {
		return err
	}
	tf.fill(e, "", "")
	tc, err := tf.config()
	if err != nil {
		return err
	}
	// A bad token is a mistake in the command line: said before Redis is
	// reached, so it does not wait on a connection.
	tok := cmp.Or(*token, e.getenv("FENCEQ_UI_TOKEN"))
	if err := dashboard.CheckToken(tok); err != nil {
		return &configError{fmt.Errorf("%w (from --ui-token or FENCEQ_UI_TOKEN)", err)}
	}
	rdb, b, err := rf.connect(ctx, e)
	if err != nil {
		return err
	}
	defer rdb.Close()
	dash, err := dashboard.New(dashboard.Config{Inspector: b.Inspector(), Token: tok, Logger: log,
		AllowedHosts: hostList(cmp.Or(*hosts, e.getenv("FENCEQ_UI_ALLOWED_HOSTS"))),
		SecureCookie: proxy.secure, ClientAddrHeader: proxy.addrHeader})
	if err != nil {
		return &configError{fmt.Errorf("%w (from --ui-allowed-hosts or FENCEQ_UI_ALLOWED_HOSTS, or --ui-client-addr-header or FENCEQ_UI_CLIENT_ADDR_HEADER)", err)}
	}
	ln, err := listenHTTP(*addr, "the dashboard", "--addr", tc, log)
	if err != nil {
		return err
	}
	srv := logServerErrors(newHTTPServer(uiOnly(dash)), log)
	go func() { _ = srv.Serve(ln) }()
	fmt.Fprintf(e.stdout, "workerd ui: dashboard at %s (%s)\n", baseURL(ln.Addr(), tc != nil)+dashboard.Mount, uiMode(*token, e))
	log.Info("workerd ui serving the dashboard", slog.String("addr", ln.Addr().String()), slog.String("prefix", b.Prefix()))
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// uiOnly serves the dashboard under /ui/ and sends / there.
func uiOnly(dash http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(dashboard.Mount, dash)
	mux.Handle("GET /{$}", http.RedirectHandler(dashboard.Mount, http.StatusFound))
	return mux
}

// dashboardURL is the address a person opens. A listener on every address
// (0.0.0.0, [::]) prints its loopback one: a browser sends the host it
// opened, and the dashboard's Host check answers the loopback names but
// not a wildcard, which is no host at all.
func dashboardURL(a net.Addr) string {
	return baseURL(a, false) + dashboard.Mount
}

func uiMode(token string, e *env) string {
	if cmp.Or(token, e.getenv("FENCEQ_UI_TOKEN")) == "" {
		return "read-only: no --ui-token or FENCEQ_UI_TOKEN"
	}
	return "actions allowed once signed in with the admin token"
}

// uiProxy is how the dashboard stands behind a proxy that terminates TLS:
// whether its cookies are Secure, and the header that carries the
// client's address (dashboard.Config's SecureCookie and ClientAddrHeader).
type uiProxy struct {
	secure     bool
	addrHeader string
}

// uiProxyOf is the setting given (a flag or workerd.yaml), else
// FENCEQ_UI_SECURE_COOKIE and FENCEQ_UI_CLIENT_ADDR_HEADER.
func uiProxyOf(e *env, secure bool, addrHeader string) (uiProxy, error) {
	p := uiProxy{secure: secure, addrHeader: cmp.Or(addrHeader, e.getenv("FENCEQ_UI_CLIENT_ADDR_HEADER"))}
	if v := e.getenv("FENCEQ_UI_SECURE_COOKIE"); !secure && v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return p, &configError{fmt.Errorf("FENCEQ_UI_SECURE_COOKIE=%q: give true or false", v)}
		}
		p.secure = b
	}
	return p, nil
}

// hostList is a comma-separated list of allowed hosts, as the flag and
// FENCEQ_UI_ALLOWED_HOSTS give it.
func hostList(s string) []string {
	if strings.TrimSpace(s) == "" {
		return nil
	}
	return strings.Split(s, ",")
}

// mountDashboard adds the dashboard to a mux of workerd's HTTP endpoints,
// and answers it: its Host check guards /metrics too.
func mountDashboard(mux *http.ServeMux, b *broker.Broker, token string, hosts []string, proxy uiProxy, log *slog.Logger) (*dashboard.Server, error) {
	if err := dashboard.CheckToken(token); err != nil {
		return nil, &configError{fmt.Errorf("%w (from ui_token or FENCEQ_UI_TOKEN)", err)}
	}
	dash, err := dashboard.New(dashboard.Config{Inspector: b.Inspector(), Token: token, AllowedHosts: hosts, Logger: log,
		SecureCookie: proxy.secure, ClientAddrHeader: proxy.addrHeader})
	if err != nil {
		return nil, &configError{fmt.Errorf("%w (from ui_allowed_hosts or FENCEQ_UI_ALLOWED_HOSTS, or ui_client_addr_header or FENCEQ_UI_CLIENT_ADDR_HEADER)", err)}
	}
	mux.Handle(dashboard.Mount, dash)
	return dash, nil
}

// devDashboard serves the dashboard for workerd dev on 127.0.0.1:8080, or
// on a free port when that one is taken, with a fresh admin token (the
// FENCEQ_UI_TOKEN one when set) so the demo's actions can be tried. It
// answers the banner line and a stop function.
func devDashboard(e *env, b *broker.Broker, log *slog.Logger) (string, func(), error) {
	ln, err := net.Listen("tcp", uiDefault)
	if err != nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return "", nil, fmt.Errorf("listen for the dashboard: %w", err)
		}
	}
	token := e.getenv("FENCEQ_UI_TOKEN")
	if token == "" {
		token = broker.NewRequestID() // 32 hex digits, 128 random bits
	}
	if err := dashboard.CheckToken(token); err != nil {
		_ = ln.Close()
		return "", nil, &configError{fmt.Errorf("%w (from FENCEQ_UI_TOKEN)", err)}
	}
	proxy, err := uiProxyOf(e, false, "")
	if err != nil {
		_ = ln.Close()
		return "", nil, err
	}
	dash, err := dashboard.New(dashboard.Config{Inspector: b.Inspector(), Token: token, Logger: log, AllowedHosts: hostList(e.getenv("FENCEQ_UI_ALLOWED_HOSTS")),
		SecureCookie: proxy.secure, ClientAddrHeader: proxy.addrHeader})
	if err != nil {
		_ = ln.Close()
		return "", nil, &configError{fmt.Errorf("%w (from FENCEQ_UI_ALLOWED_HOSTS or FENCEQ_UI_CLIENT_ADDR_HEADER)", err)}
	}
	srv := newHTTPServer(uiOnly(dash))
	go func() { _ = srv.Serve(ln) }()
	line := fmt.Sprintf("  dashboard:              %s  (admin token for its actions: %s)", dashboardURL(ln.Addr()), token)
	return line, func() { _ = srv.Close() }, nil
}
