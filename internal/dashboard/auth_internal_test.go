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

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestWrongSignInsLoggedOncePerSecond: a flood of wrong tokens (thousands
// a second from one client) writes at most one log line a second, with
// how many were refused since the last line; none is lost from the count.
// Each comes from an address of its own, under the rate limit.
func TestWrongSignInsLoggedOncePerSecond(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	s, err := New(Config{Inspector: b.Inspector(), Token: "s3cret-admin-token", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_700_000_000, 0)
	s.now = func() time.Time { return now }
	sent := 0
	wrong := func(n int) {
		for range n {
			req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1:8080/ui/login", strings.NewReader(url.Values{"token": {"guess"}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			req.Host = "localhost"
			req.RemoteAddr = fmt.Sprintf("198.51.%d.%d:40000", sent/250, sent%250)
			sent++
			w := httptest.NewRecorder()
			s.login(w, req)
			if w.Code != http.StatusForbidden {
				t.Fatalf("a wrong token answered %d, want 403", w.Code)
			}
		}
	}
	lines := func() []string {
		var out []string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "wrong token") {
				out = append(out, l)
			}
		}
		return out
	}
	wrong(500) // within one second
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "count=1") {
		t.Fatalf("500 wrong sign-ins within a second wrote %d lines, want 1 (count=1, the first):\n%s", len(got), strings.Join(got[:min(len(got), 5)], "\n"))
	}
	now = now.Add(1100 * time.Millisecond)
	wrong(1)
	if got := lines(); len(got) != 2 || !strings.Contains(got[1], "count=500") {
		t.Fatalf("the first wrong sign-in a second later wrote %q; want a second line with count=500 (499 held back, and itself)", got[1:])
	}
}

// TestNewRefusesShortToken: a token under TokenMinBytes is refused, with
// how to make one, and without repeating it.
func TestNewRefusesShortToken(t *testing.T) {
	mr := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	b, err := broker.New(c, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tok := range []string{"Z", "fifteen-bytes!!"} {
		_, err := New(Config{Inspector: b.Inspector(), Token: tok})
		if err == nil || !strings.Contains(err.Error(), "at least 16 bytes") || !strings.Contains(err.Error(), "openssl rand -hex 16") || strings.Contains(err.Error(), tok) {
			t.Errorf("New with a %d-byte token: %v; want an error saying it needs 16 bytes and how to make one, not repeating it", len(tok), err)
		}
	}
	for _, tok := range []string{"", "sixteen-bytes!!!"} {
		if _, err := New(Config{Inspector: b.Inspector(), Token: tok}); err != nil {
			t.Errorf("New with a %d-byte token: %v", len(tok), err)
		}
	}
}
