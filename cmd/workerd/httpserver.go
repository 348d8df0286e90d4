package main

import (
	"cmp"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"
)

// The bounds of every HTTP server workerd runs (newHTTPServer). No page
// takes long: each request's Redis work is bounded to a few seconds
// (the dashboard's 5 s, /readyz's and /metrics' 2 s), and the live
// updates are polls, not streams, so a response that takes longer than
// httpWriteTimeout is a client that does not read.
const (
	httpReadHeaderTimeout = 5 * time.Second
	httpReadTimeout       = 30 * time.Second // headers and body: a form is at most 64 KiB
	httpWriteTimeout      = 30 * time.Second
	httpIdleTimeout       = 2 * time.Minute
	httpMaxHeaderBytes    = 64 << 10
)

// newHTTPServer is the server of workerd ui, of workerd run's endpoints
// and of workerd dev's dashboard, built here only, so that none of them
// can drift: a client that sends slowly, reads slowly or sends huge
// headers holds a connection and its memory for a bounded time only, and
// headers over httpMaxHeaderBytes are refused (431).
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: httpReadHeaderTimeout,
		ReadTimeout:       httpReadTimeout,
		WriteTimeout:      httpWriteTimeout,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    httpMaxHeaderBytes,
	}
}

// tlsFlags are the certificate and key of an HTTP listener workerd runs
// (run, api, ui): both given, it serves HTTPS; neither, plain HTTP.
type tlsFlags struct{ cert, key string }

// register adds the flags; fromConfig says that the config file's
// tls_cert and tls_key come after the environment (workerd run).
func (f *tlsFlags) register(fs *flag.FlagSet, fromConfig bool) {
	certDefault, keyDefault := "$FENCEQ_TLS_CERT", "$FENCEQ_TLS_KEY"
	if fromConfig {
		certDefault, keyDefault = certDefault+", else the config's tls_cert", keyDefault+", else the config's tls_key"
	}
	fs.StringVar(&f.cert, "tls-cert", "", "PEM certificate (chain) file: serve HTTPS, with --tls-key (default "+certDefault+")")
	fs.StringVar(&f.key, "tls-key", "", "PEM private key file of --tls-cert (default "+keyDefault+")")
}

// fill takes what the flags leave empty from FENCEQ_TLS_CERT and
// FENCEQ_TLS_KEY, then from the config file's tls_cert and tls_key.
func (f *tlsFlags) fill(e *env, cert, key string) {
	f.cert = cmp.Or(f.cert, e.getenv("FENCEQ_TLS_CERT"), cert)
	f.key = cmp.Or(f.key, e.getenv("FENCEQ_TLS_KEY"), key)
}

// config loads the certificate and key: nil when neither is set (plain
// HTTP). A missing half, or a pair that does not load, is a configuration
// error at start, never at the first request.
func (f tlsFlags) config() (*tls.Config, error) {
	switch {
	case f.cert == "" && f.key == "":
		return nil, nil
	case f.cert == "" || f.key == "":
		return nil, &configError{errors.New("TLS needs both a certificate and its key: give --tls-cert and --tls-key (FENCEQ_TLS_CERT and FENCEQ_TLS_KEY, or tls_cert and tls_key in workerd.yaml), or neither for plain HTTP")}
	}
	pair, err := tls.LoadX509KeyPair(f.cert, f.key)
	if err != nil {
		return nil, &configError{fmt.Errorf("load the TLS certificate %s and key %s: %w; give PEM files of one certificate and its private key", f.cert, f.key, err)}
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// listenHTTP listens on addr for what, with TLS when tc is set. Beyond
// loopback without TLS, it logs a warning: tokens, the dashboard's
// session cookie and job payloads would cross the network in clear.
func listenHTTP(addr, what, flagName string, tc *tls.Config, log *slog.Logger) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &configError{fmt.Errorf("listen on %s for %s: %w; pick another address with %s", addr, what, err, flagName)}
	}
	if tc == nil && !isLoopback(ln.Addr()) {
		log.Warn("workerd listens beyond loopback without TLS: tokens, session cookies and job payloads cross the network in clear; "+
			"give --tls-cert and --tls-key (tls_cert and tls_key in workerd.yaml), or listen on 127.0.0.1 behind a proxy that terminates TLS",
			slog.String("addr", ln.Addr().String()), slog.String("serving", what))
	}
	if tc != nil {
		ln = tls.NewListener(ln, tc)
	}
	return ln, nil
}

// isLoopback reports whether a listener's address is a loopback one;
// a wildcard address (0.0.0.0, [::]) is every address, so not.
func isLoopback(a net.Addr) bool {
	t, ok := a.(*net.TCPAddr)
	return ok && t.IP.IsLoopback()
}

// logServerErrors sends srv's own errors (a TLS handshake a client
// broke off, a port scanner's garbage) to log at debug level, in its
// format, instead of unformatted lines on standard error.
func logServerErrors(srv *http.Server, log *slog.Logger) *http.Server {
	srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelDebug)
	return srv
}

// baseURL is the address a person or a client opens, https:// with TLS.
// A listener on every address prints its loopback one (dashboardURL says
// why).
func baseURL(a net.Addr, secure bool) string {
	if t, ok := a.(*net.TCPAddr); ok && (t.IP == nil || t.IP.IsUnspecified()) {
		a = &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: t.Port}
	}
	if secure {
		return "https://" + a.String()
	}
	return "http://" + a.String()
}
