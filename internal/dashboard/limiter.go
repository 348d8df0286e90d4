package dashboard

import (
	"math"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"
)

const (
	// SignInBurst is how many wrong admin tokens one client address may
	// send in a row; after that, one more each SignInEvery.
	SignInBurst = 10
	// SignInEvery is how often a client address earns one more try.
	SignInEvery = 6 * time.Second
	// signInAddrsMax bounds the client addresses the limiter remembers.
	// Past it, the addresses it has no room for share one allowance, so a
	// guesser with many addresses gets no more tries than one.
	signInAddrsMax = 10_000
)

// signInLimiter bounds wrong sign-ins per client address: a token bucket
// of SignInBurst tries that refills one try each SignInEvery. An address
// whose bucket is full again is forgotten, so memory holds only the
// addresses that failed lately, at most signInAddrsMax and a shared one.
// Every sign-in spends a try before its token is compared, and one that
// succeeds gives them all back: in effect only wrong tokens count. While
// an address has none left, its sign-ins are refused uncompared.
type signInLimiter struct {
	mu      sync.Mutex
	addrs   map[string]*tries
	swept   time.Time // the last sweep of forgotten addresses
	burst   float64
	every   time.Duration
	maxKept int
}

// tries is one address's bucket: left tries at the instant at.
type tries struct {
	left float64
	at   time.Time
}

// overflow is the key of the allowance shared by addresses the limiter
// has no room for.
const overflow = "(others)"

func newSignInLimiter() *signInLimiter {
	return &signInLimiter{addrs: map[string]*tries{}, burst: SignInBurst, every: SignInEvery, maxKept: signInAddrsMax}
}

// refill brings b to now.
func (l *signInLimiter) refill(b *tries, now time.Time) {
	if el := now.Sub(b.at); el > 0 {
		b.left = math.Min(l.burst, b.left+float64(el)/float64(l.every))
		b.at = now
	}
}

// try spends one of addr's tries and answers 0, or, when it has none
// left, answers how long until it has one (spending nothing). The try is
// spent before the token is compared, in one step with the check, so
// that requests sent at once cannot all pass the check first; a sign-in
// that succeeds gives the address its tries back (succeeded).
func (l *signInLimiter) try(addr string, now time.Time) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.addrs[addr]
	if b == nil {
		if len(l.addrs) >= l.maxKept {
			l.sweep(now)
		}
		key := addr
		if len(l.addrs) >= l.maxKept {
			key = overflow
		}
		if b = l.addrs[key]; b == nil {
			b = &tries{left: l.burst, at: now}
			l.addrs[key] = b
		}
	}
	l.refill(b, now)
	if b.left < 1 {
		return time.Duration(math.Ceil((1-b.left)*l.every.Seconds())) * time.Second // whole seconds, as Retry-After
	}
	b.left--
	return 0
}

// succeeded forgets addr: a user who signed in starts afresh.
func (l *signInLimiter) succeeded(addr string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if addr != overflow {
		delete(l.addrs, addr)
	}
}

// sweep forgets the addresses whose buckets are full again, at most once
// a second, so that a flood of new addresses costs one pass a second.
func (l *signInLimiter) sweep(now time.Time) {
	if now.Sub(l.swept) < time.Second {
		return
	}
	l.swept = now
	for k, b := range l.addrs {
		if l.refill(b, now); b.left >= l.burst && k != overflow {
			delete(l.addrs, k)
		}
	}
}

// clientAddr is the address a request's sign-in counts against: the
// connection's peer, or, with header set (a TLS-terminating proxy in
// front), the last address in that header, which the proxy nearest the
// dashboard wrote (a client can only add addresses before it). An IPv6
// address counts by its /64, what one host usually has to itself.
func clientAddr(r *http.Request, header string) string {
	addr := r.RemoteAddr
	if host, _, err := net.SplitHostPort(addr); err == nil {
		addr = host
	}
	if header != "" {
		if vs := r.Header.Values(header); len(vs) > 0 {
			parts := strings.Split(vs[len(vs)-1], ",")
			if last := strings.TrimSpace(parts[len(parts)-1]); last != "" {
				addr = last
				if host, _, err := net.SplitHostPort(last); err == nil {
					addr = host // "ip:port", or "[v6]:port"
				}
			}
		}
	}
	ip, err := netip.ParseAddr(strings.Trim(addr, "[]"))
	if err != nil {
		return cut(addr, echoMax) // not an address: counted as the text it is
	}
	ip = ip.Unmap()
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
