package dashboard

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

const testToken = "s3cret-admin-token"

// limitRig is a dashboard whose clock the test moves, and a way to sign
// in to it from an address.
type limitRig struct {
	s   *Server
	now time.Time
}

func newLimitRig(t *testing.T, cfg Config) *limitRig {
	t.Helper()
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Inspector, cfg.Token = b.Inspector(), testToken
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(&lockedBuffer{}, nil))
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := &limitRig{s: s, now: time.Unix(1_700_000_000, 0)}
	s.now = func() time.Time { return r.now }
	return r
}

// signIn posts a sign-in from remote (with the headers given, in pairs).
func (r *limitRig) signIn(tok, remote string, headers ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(http.MethodPost, "http://localhost/ui/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	req.Host, req.RemoteAddr = "localhost", remote
	w := httptest.NewRecorder()
	r.s.login(w, req)
	return w
}

// An address that sent SignInBurst wrong tokens is refused, 429 with
// Retry-After and a message saying when to try again, before its token is
// even compared (the right one too); other addresses are not; it earns a
// try back each SignInEvery, and a sign-in that succeeds starts it afresh.
func TestSignInRateLimitedPerAddress(t *testing.T) {
	r := newLimitRig(t, Config{})
	const guesser, other = "203.0.113.9:51000", "203.0.113.10:51000"
	for i := range SignInBurst {
		if w := r.signIn("guess", guesser); w.Code != http.StatusForbidden {
			t.Fatalf("wrong token %d answered %d, want 403", i+1, w.Code)
		}
	}
	for _, tok := range []string{"guess", testToken} {
		w := r.signIn(tok, guesser)
		if w.Code != http.StatusTooManyRequests || w.Header().Get("Retry-After") == "" {
			t.Fatalf("after %d wrong tokens, a sign-in with %q answered %d (Retry-After %q), want 429 with Retry-After", SignInBurst, tok, w.Code, w.Header().Get("Retry-After"))
		}
		if body := w.Body.String(); !strings.Contains(body, "Too many wrong admin tokens from your address (203.0.113.9)") || !strings.Contains(body, "wait 6s") {
			t.Fatalf("the refusal says %q; want the address and how long to wait", body[strings.Index(body, "<main"):][:400])
		}
	}
	if w := r.signIn("guess", other); w.Code != http.StatusForbidden {
		t.Fatalf("another address answered %d, want 403: the limit is per address", w.Code)
	}
	r.now = r.now.Add(SignInEvery)
	if w := r.signIn("guess", guesser); w.Code != http.StatusForbidden {
		t.Fatalf("after %s, one more try answered %d, want 403", SignInEvery, w.Code)
	}
	if w := r.signIn(testToken, guesser); w.Code != http.StatusTooManyRequests {
		t.Fatalf("the try after it answered %d, want 429", w.Code)
	}
	r.now = r.now.Add(SignInEvery)
	if w := r.signIn(testToken, guesser); w.Code != http.StatusSeeOther {
		t.Fatalf("the right token after a wait answered %d, want 303", w.Code)
	}
	for i := range SignInBurst {
		if w := r.signIn("guess", guesser); w.Code != http.StatusForbidden {
			t.Fatalf("after signing in, wrong token %d answered %d, want 403: a sign-in starts afresh", i+1, w.Code)
		}
	}
}

// Behind a proxy, the address that counts is the last of
// ClientAddrHeader: what a client writes before it changes nothing, and
// without the setting the header is not read at all.
func TestSignInRateLimitBehindAProxy(t *testing.T) {
	const proxy = "10.0.0.2:39000"
	t.Run("the header's last address", func(t *testing.T) {
		r := newLimitRig(t, Config{ClientAddrHeader: "X-Forwarded-For"})
		for i := range SignInBurst {
			// Each claims another address in front; the proxy appended the real one.
			r.signIn("guess", proxy, "X-Forwarded-For", fmt.Sprintf("192.0.2.%d, 198.51.100.7", i))
		}
		if w := r.signIn("guess", proxy, "X-Forwarded-For", "192.0.2.200, 198.51.100.7"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("the client at 198.51.100.7 answered %d, want 429", w.Code)
		}
		if w := r.signIn("guess", proxy, "X-Forwarded-For", "198.51.100.8"); w.Code != http.StatusForbidden {
			t.Fatalf("another client behind the same proxy answered %d, want 403", w.Code)
		}
	})
	t.Run("the connection's address without the setting", func(t *testing.T) {
		r := newLimitRig(t, Config{})
		for i := range SignInBurst {
			r.signIn("guess", proxy, "X-Forwarded-For", fmt.Sprintf("198.51.100.%d", i))
		}
		if w := r.signIn("guess", proxy, "X-Forwarded-For", "198.51.100.99"); w.Code != http.StatusTooManyRequests {
			t.Fatalf("a forwarded address was believed without ClientAddrHeader: %d, want 429 for the proxy's address", w.Code)
		}
	})
	t.Run("a header name that is none", func(t *testing.T) {
		mr := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		b, _ := broker.New(c, broker.Options{})
		_, err := New(Config{Inspector: b.Inspector(), ClientAddrHeader: "X-Forwarded-For: 1.2.3.4"})
		if err == nil || !strings.Contains(err.Error(), "not a header name") || !strings.Contains(err.Error(), "X-Forwarded-For or X-Real-IP") {
			t.Fatalf("New with a bad header name: %v", err)
		}
	})
}

// The address a request counts against: the peer's, without its port; an
// IPv4-mapped address as IPv4; IPv6 by its /64; a header's last entry.
func TestClientAddr(t *testing.T) {
	for _, tc := range []struct{ remote, header, value, want string }{
		{"203.0.113.9:51000", "", "", "203.0.113.9"},
		{"[2001:db8:1:2:3:4:5:6]:443", "", "", "2001:db8:1:2::/64"},
		{"[::ffff:203.0.113.9]:80", "", "", "203.0.113.9"},
		{"10.0.0.2:1", "X-Forwarded-For", "1.1.1.1, 203.0.113.9", "203.0.113.9"},
		{"10.0.0.2:1", "X-Real-IP", "[2001:db8::1]:5000", "2001:db8::/64"},
		{"10.0.0.2:1", "X-Real-IP", "", "10.0.0.2"},
	} {
		req := httptest.NewRequest(http.MethodPost, "/ui/login", nil)
		req.RemoteAddr = tc.remote
		if tc.value != "" {
			req.Header.Set(tc.header, tc.value)
		}
		if got := clientAddr(req, tc.header); got != tc.want {
			t.Errorf("clientAddr(%s, %s: %q) = %q, want %q", tc.remote, tc.header, tc.value, got, tc.want)
		}
	}
}

// The limiter keeps at most maxKept addresses (and a shared allowance):
// a guesser with 100,000 addresses fills it, then its new addresses share
// one allowance and are refused together; addresses whose tries came
// back are forgotten, so room comes back.
func TestSignInLimiterBoundedMemory(t *testing.T) {
	l := newSignInLimiter()
	l.maxKept = 100
	now := time.Unix(1_700_000_000, 0)
	refused := 0
	for i := range 100_000 {
		addr := fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)
		if l.try(addr, now) > 0 {
			refused++
		}
	}
	if len(l.addrs) > l.maxKept+1 {
		t.Fatalf("the limiter holds %d addresses, want at most %d", len(l.addrs), l.maxKept+1)
	}
	if want := 100_000 - l.maxKept - SignInBurst; refused < want {
		t.Fatalf("%d of 100,000 guesses refused, want at least %d: the addresses past the limit share one allowance", refused, want)
	}
	now = now.Add(SignInBurst * SignInEvery)
	l.try("192.0.2.1", now) // a sweep: every bucket is full again
	if len(l.addrs) > 2 {
		t.Fatalf("after every address's tries came back the limiter holds %d addresses, want 2 at most", len(l.addrs))
	}
	if _, ok := l.addrs["192.0.2.1"]; !ok {
		t.Fatal("a new address after the sweep shares the allowance instead of having its own")
	}
}

// With SecureCookie, the session and flash cookies are Secure on plain
// HTTP (a proxy in front terminates TLS); without it, only on TLS.
func TestSecureCookie(t *testing.T) {
	for _, secure := range []bool{false, true} {
		r := newLimitRig(t, Config{SecureCookie: secure})
		w := r.signIn(testToken, "127.0.0.1:5000")
		cookies := w.Result().Cookies()
		if len(cookies) < 2 {
			t.Fatalf("a sign-in set %d cookies, want the session's and the flash's", len(cookies))
		}
		for _, c := range cookies {
			if c.Secure != secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
				t.Errorf("SecureCookie %v: cookie %s is Secure %v, HttpOnly %v, SameSite %v", secure, c.Name, c.Secure, c.HttpOnly, c.SameSite)
			}
		}
	}
}

// Wrong tokens sent all at once from one address get SignInBurst
// comparisons, not one each: the try is spent in the same step as the
// check (a regression: a check, then the token, then the count let 200
// parallel guesses through).
func TestSignInRateLimitParallel(t *testing.T) {
	r := newLimitRig(t, Config{})
	codes := make(chan int, 200)
	var wg sync.WaitGroup
	for range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- r.signIn("guess", "203.0.113.9:5000").Code
		}()
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[http.StatusForbidden] != SignInBurst || n[http.StatusTooManyRequests] != 200-SignInBurst {
		t.Fatalf("200 parallel wrong tokens: %v, want %d compared (403) and the rest 429", n, SignInBurst)
	}
}
