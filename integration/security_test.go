package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// secPool starts a pool on b serving queue with a handler that succeeds,
// and stops it at the end of the test.
func secPool(t *testing.T, b *broker.Broker, queue string, logs io.Writer) (*worker.Pool, error) {
	t.Helper()
	mux := handlers.NewMux()
	mux.HandleFunc("sec.ok", func(ctx context.Context, job *handlers.Job) error {
		job.SetResult([]byte(`"ok"`))
		return nil
	})
	p, err := worker.New(b, mux, worker.Config{Queues: []worker.Queue{{Name: queue}}, Concurrency: 2,
		LeaseDuration: 500 * time.Millisecond, PollInterval: 50 * time.Millisecond, ShutdownTimeout: 2 * time.Second,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		return nil, err
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = p.Shutdown(ctx)
	})
	return p, nil
}

// secWaitDone waits for a job to be done.
func secWaitDone(t *testing.T, b *broker.Broker, queue, id string, logs fmt.Stringer) {
	t.Helper()
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		j, err := b.Inspector().Job(context.Background(), queue, id)
		if err == nil && j.State == broker.StateDone {
			return
		}
		if err == nil && j.State.Final() {
			t.Fatalf("job %s ended %s: %s", id, j.State, j.LastError)
		}
	}
	t.Fatalf("job %s not done within 15s; logs:\n%s", id, logs)
}

// minimalConfig writes a workerd.yaml serving queue with a handler of kind
// sec.ok that runs `true`.
func minimalConfig(t *testing.T, queue, extra string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "workerd.yaml")
	writeFile(t, path, extra+"pools:\n  - queues: ["+queue+"]\n    lease: 1s\n    poll_interval: 50ms\nhandlers:\n  sec.ok: {exec: {command: [true]}}\n", 0o644)
	return path
}

// TestACL: a Redis user allowed everything runs the queue end to end; one
// that may not run scripts gets a clear NOPERM error, from the library and
// from workerd (exit 2, naming EVAL/EVALSHA/SCRIPT); a wrong password is a
// clear error at connect.
func TestACL(t *testing.T) {
	t.Parallel()
	admin := startServer(t)
	ctx := context.Background()
	addr := admin.Options().Addr
	for _, args := range [][]any{
		{"ACL", "SETUSER", "full", "on", ">pw", "~*", "&*", "+@all"},
		{"ACL", "SETUSER", "noeval", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval", "-script", "-fcall", "-fcall_ro", "-function"},
	} {
		if err := admin.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
	}
	user := func(t *testing.T, name, password string) *broker.Broker {
		c := redis.NewClient(&redis.Options{Addr: addr, Username: name, Password: password, MaxRetries: -1})
		t.Cleanup(func() { _ = c.Close() })
		b, err := broker.New(c, broker.Options{Prefix: "fqacl"})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	t.Run("FullUser", func(t *testing.T) {
		t.Parallel()
		b := user(t, "full", "pw")
		var logs syncBuffer
		if _, err := secPool(t, b, "acl-full", &logs); err != nil {
			t.Fatalf("start pool as the full user: %v", err)
		}
		id, err := b.Client().Enqueue(ctx, broker.Job{Queue: "acl-full", Kind: "sec.ok"})
		if err != nil {
			t.Fatalf("enqueue as the full user: %v", err)
		}
		secWaitDone(t, b, "acl-full", id, &logs)
	})

	t.Run("NoEvalUser", func(t *testing.T) {
		t.Parallel()
		b := user(t, "noeval", "pw")
		var logs syncBuffer
		_, startErr := secPool(t, b, "acl-noeval", &logs)
		// Start loads the scripts, so the pool refuses to start at all.
		if startErr == nil || !strings.Contains(startErr.Error(), "NOPERM") || !strings.Contains(startErr.Error(), "EVAL, EVALSHA and SCRIPT") {
			t.Fatalf("Start as a user without EVAL/EVALSHA: %v; want NOPERM and what the user needs", startErr)
		}
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "acl-noeval", Kind: "sec.ok"}); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("Enqueue as a user without EVAL/EVALSHA: %v; want NOPERM", err)
		}
		if err := b.LoadScripts(ctx); err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Fatalf("LoadScripts as the restricted user: %v; want NOPERM", err)
		}
	})

	t.Run("NoEvalUserWorkerd", func(t *testing.T) {
		t.Parallel()
		cfg := minimalConfig(t, "acl-bin", "")
		code, _, errOut := workerd(t, "", "run", "--config", cfg, "--http", "off", "--prefix", "fqacl",
			"--redis", "redis://noeval:pw@"+addr)
		if code != 2 {
			t.Fatalf("workerd run as the restricted user: exit %d, want 2:\n%s", code, errOut)
		}
		for _, w := range []string{"NOPERM", "EVAL, EVALSHA and SCRIPT"} {
			if !strings.Contains(errOut, w) {
				t.Fatalf("workerd's error does not mention %q:\n%s", w, errOut)
			}
		}
	})

	t.Run("WrongPassword", func(t *testing.T) {
		t.Parallel()
		b := user(t, "full", "not-the-password")
		var logs syncBuffer
		_, err := secPool(t, b, "acl-wrongpass", &logs)
		if err == nil || !strings.Contains(err.Error(), "WRONGPASS") || !strings.Contains(err.Error(), "password") {
			t.Fatalf("pool start with a wrong password: %v; want WRONGPASS and a hint about the password", err)
		}
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: "acl-wrongpass", Kind: "sec.ok"}); err == nil || !strings.Contains(err.Error(), "WRONGPASS") {
			t.Fatalf("enqueue with a wrong password: %v; want WRONGPASS", err)
		}
		cfg := minimalConfig(t, "acl-wrongpass", "")
		code, _, errOut := workerd(t, "", "run", "--config", cfg, "--http", "off", "--prefix", "fqacl",
			"--redis", "redis://full:not-the-password@"+addr)
		if code != 2 || !strings.Contains(errOut, "Redis") || !strings.Contains(errOut, "WRONGPASS") {
			t.Fatalf("workerd run with a wrong password: exit %d, want 2 naming Redis and WRONGPASS:\n%s", code, errOut)
		}
		if strings.Contains(errOut, "not-the-password") {
			t.Fatalf("workerd printed the password:\n%s", errOut)
		}
	})
}

// testCA is a throwaway certificate authority and a server certificate for
// 127.0.0.1 that it signed, written as PEM files.
type testCA struct {
	pool                      *x509.CertPool
	caFile, certFile, keyFile string
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "fenceq test CA"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Minute), NotAfter: now.Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(srvKey)
	if err != nil {
		t.Fatal(err)
	}
	ca := &testCA{pool: x509.NewCertPool(), caFile: filepath.Join(dir, "ca.crt"),
		certFile: filepath.Join(dir, "server.crt"), keyFile: filepath.Join(dir, "server.key")}
	ca.pool.AddCert(caCert)
	writeFile(t, ca.caFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})), 0o644)
	writeFile(t, ca.certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER})), 0o644)
	writeFile(t, ca.keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})), 0o600)
	return ca
}

// startTLSServer runs a private redis-server that listens only for TLS, or
// skips the test, loudly, when this redis-server build has no TLS support
// (a property of the machine's package, not of fenceq). It answers the
// address.
func startTLSServer(t *testing.T, ca *testCA) string {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not installed: %v", err)
		}
		t.Skipf("SKIP: redis-server not installed: %v", err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	var out syncBuffer
	cmd := exec.Command(path, "--port", "0", "--tls-port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", t.TempDir(),
		"--tls-cert-file", ca.certFile, "--tls-key-file", ca.keyFile, "--tls-ca-cert-file", ca.caFile,
		"--tls-auth-clients", "no")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: ca.pool, MinVersion: tls.VersionTLS12}, MaxRetries: -1})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			msg := fmt.Sprintf("SKIPPING TLS test: this redis-server (%s) would not start with --tls-port (%v), most likely because it was built without TLS support; "+
				"that is a property of the machine's Redis package, not of fenceq. Its output:\n%s", path, err, out.String())
			if os.Getenv("CI") != "true" {
				warn("\n*** " + msg + "\n\n")
			}
			t.Skip(msg)
		default:
		}
		if err := c.Ping(context.Background()).Err(); err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server with TLS on %s did not answer; its output:\n%s", addr, out.String())
		}
	}
}

// TestTLS: enqueue, a pool and done over TLS with a private CA, through the
// library and through the workerd binary.
func TestTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t)
	addr := startTLSServer(t, ca)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: addr, TLSConfig: &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{Prefix: "fqtls"})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("Library", func(t *testing.T) {
		var logs syncBuffer
		if _, err := secPool(t, b, "tls-lib", &logs); err != nil {
			t.Fatalf("start pool over TLS: %v", err)
		}
		id, err := b.Client().Enqueue(ctx, broker.Job{Queue: "tls-lib", Kind: "sec.ok"})
		if err != nil {
			t.Fatalf("enqueue over TLS: %v", err)
		}
		secWaitDone(t, b, "tls-lib", id, &logs)

		// Without the CA the server is not trusted; a plain connection
		// gets nowhere.
		for name, opt := range map[string]*redis.Options{
			"system roots": {Addr: addr, TLSConfig: &tls.Config{ServerName: "127.0.0.1"}, MaxRetries: -1, DialTimeout: 2 * time.Second},
			"no TLS":       {Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second},
		} {
			bad := redis.NewClient(opt)
			if err := bad.Ping(ctx).Err(); err == nil {
				t.Errorf("PING with %s succeeded on a TLS-only server with a private CA", name)
			}
			_ = bad.Close()
		}
	})

	// workerd has no flag for a CA file; it uses the system roots, which Go
	// on Linux reads from SSL_CERT_FILE when set. Without it the private CA
	// is not trusted, and the error says so.
	t.Run("Workerd", func(t *testing.T) {
		url := "rediss://" + addr
		run := func(certFile string, args ...string) (int, string, string) {
			cmd := exec.Command(workerdBin(t), args...)
			cmd.Env = append(os.Environ(), "REDIS_URL=")
			if certFile != "" {
				cmd.Env = append(cmd.Env, "SSL_CERT_FILE="+certFile, "SSL_CERT_DIR="+t.TempDir())
			}
			var o, e bytes.Buffer
			cmd.Stdout, cmd.Stderr = &o, &e
			err := cmd.Run()
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode(), o.String(), e.String()
			} else if err != nil {
				t.Fatal(err)
			}
			return 0, o.String(), e.String()
		}
		code, _, errOut := run("", "enqueue", "tls-bin", "sec.ok", "--redis", url, "--prefix", "fqtls")
		if code != 2 || !strings.Contains(errOut, "cannot reach Redis") || !strings.Contains(errOut, "certificate") {
			t.Fatalf("workerd enqueue over TLS without the CA: exit %d, want 2 naming the certificate:\n%s", code, errOut)
		}
		code, out, errOut := run(ca.caFile, "enqueue", "tls-bin", "sec.ok", "--redis", url, "--prefix", "fqtls")
		if code != 0 {
			t.Fatalf("workerd enqueue over TLS with SSL_CERT_FILE: exit %d:\n%s", code, errOut)
		}
		id := strings.TrimSpace(out)

		cfg := minimalConfig(t, "tls-bin", "http: \"off\"\n")
		cmd := exec.Command(workerdBin(t), "run", "--config", cfg, "--redis", url, "--prefix", "fqtls", "--log-format", "json")
		cmd.Env = append(os.Environ(), "REDIS_URL=", "SSL_CERT_FILE="+ca.caFile, "SSL_CERT_DIR="+t.TempDir())
		var logs syncBuffer
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
		secWaitDone(t, b, "tls-bin", id, &logs)
		_ = cmd.Process.Signal(syscall.SIGTERM)
		if err := <-done; err != nil {
			t.Fatalf("workerd run after SIGTERM: %v\n%s", err, logs.String())
		}
		done <- nil // for the cleanup
	})
}

// TestWorkerdHTTPLoopbackByDefault: with no --http flag and no "http" in
// the config, workerd serves /healthz, /readyz and /metrics on a loopback
// address only, as its own log says.
func TestWorkerdHTTPLoopbackByDefault(t *testing.T) {
	t.Parallel()
	client(t) // skips (or fails under CI) without Redis
	prefix := fmt.Sprintf("fqhttp-%d", time.Now().UnixNano())
	t.Cleanup(func() { deletePrefixKeys(t, prefix) })
	cfg := minimalConfig(t, "http-default", "")
	cmd := exec.Command(workerdBin(t), "run", "--config", cfg, "--redis", "redis://"+redisAddr, "--prefix", prefix, "--log-format", "json")
	cmd.Env = append(os.Environ(), "REDIS_URL=")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })

	type line struct {
		Msg  string `json:"msg"`
		Addr string `json:"addr"`
	}
	lines := make(chan line, 64)
	var all syncBuffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			all.Write(append(sc.Bytes(), '\n'))
			var l line
			if json.Unmarshal(sc.Bytes(), &l) == nil {
				select {
				case lines <- l:
				default:
				}
			}
		}
		close(lines)
		done <- cmd.Wait()
	}()

	var serving string
	timeout := time.After(15 * time.Second)
	for serving == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				out := all.String()
				if strings.Contains(out, "listen on 127.0.0.1:9090") {
					t.Skipf("SKIP the loopback check: port 9090 (workerd's default) is taken on this machine; workerd said:\n%s", out)
				}
				t.Fatalf("workerd exited before serving its endpoints:\n%s", out)
			}
			if strings.HasPrefix(l.Msg, "workerd serving /healthz") {
				serving = l.Addr
			}
		case <-timeout:
			t.Fatalf("workerd did not log its listener within 15s:\n%s", all.String())
		}
	}
	host, _, err := net.SplitHostPort(serving)
	if err != nil {
		t.Fatalf("logged addr %q: %v", serving, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		t.Fatalf("workerd serves its endpoints on %s by default, not on a loopback address", serving)
	}
	resp, err := http.Get("http://" + serving + "/healthz")
	if err != nil {
		t.Fatalf("GET /healthz on %s: %v", serving, err)
	}
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(body)) != "ok" {
		t.Fatalf("GET /healthz: %d %q", resp.StatusCode, body)
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("workerd run after SIGTERM: %v\n%s", err, all.String())
		}
		done <- nil // for the cleanup
	case <-time.After(15 * time.Second):
		t.Fatalf("workerd did not stop after SIGTERM:\n%s", all.String())
	}
}
