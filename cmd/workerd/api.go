package main

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/fenceq/fenceq/api"
	"github.com/fenceq/fenceq/broker"
)

const apiDefault = "127.0.0.1:8090"

// runAPI serves the HTTP API alone, for producers in other languages
// where no workers run (or where they run under another runner).
func runAPI(ctx context.Context, e *env, args []string) error {
	const synopsis = "--api-token TOKEN [--redis URL] [--listen 127.0.0.1:8090] [--tls-cert FILE --tls-key FILE]"
	fs := newFlags(e, "api", synopsis)
	var rf redisFlags
	rf.register(fs)
	var lf logFlags
	lf.register(fs)
	var tf tlsFlags
	tf.register(fs, false)
	addr := fs.String("listen", apiDefault, "address to serve the API on (loopback by default; beyond it, give --tls-cert and --tls-key or put it behind a proxy with TLS)")
	token := fs.String("api-token", "", "bearer token every request must carry, at least 16 bytes (openssl rand -hex 32) (default $FENCEQ_API_TOKEN)")
	if _, err := parse(fs, synopsis, args, 0, 0); err != nil {
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
	tok := cmp.Or(*token, e.getenv("FENCEQ_API_TOKEN"))
	if err := api.CheckToken(tok); err != nil {
		return &configError{fmt.Errorf("%s (give it with --api-token or FENCEQ_API_TOKEN)", strings.TrimPrefix(err.Error(), "api: "))}
	}
	rdb, b, err := connectForRun(ctx, e, &rf)
	if err != nil {
		return err
	}
	defer rdb.Close()
	h, err := newAPI(b, tok, log)
	if err != nil {
		return err
	}
	ln, err := listenHTTP(*addr, "the API", "--listen", tc, log)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle(api.Mount, h)
	probes(mux, rdb, b)
	srv := logServerErrors(newHTTPServer(mux), log)
	go func() { _ = srv.Serve(ln) }()
	url := baseURL(ln.Addr(), tc != nil) + api.Mount
	fmt.Fprintf(e.stdout, "workerd api: serving the API at %s (OpenAPI document at %sopenapi.json)\n", url, url)
	log.Info("workerd api serving", slog.String("addr", ln.Addr().String()), slog.Bool("tls", tc != nil), slog.String("prefix", b.Prefix()))
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
	defer cancel()
	if srv.Shutdown(sctx) != nil {
		_ = srv.Close() // waits still blocked: their clients see the connection close, and wait again
	}
	return nil
}

// newAPI builds the API handler over b. It mounts at api.Mount.
func newAPI(b *broker.Broker, token string, log *slog.Logger) (http.Handler, error) {
	h, err := api.New(api.Config{Broker: b, Token: token, Logger: log})
	if err != nil {
		return nil, &configError{err}
	}
	return h, nil
}
