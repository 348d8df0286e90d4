package brokertest

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// dyingProxy stands between a client and a server and, once cut, lets
// the next request reach the server but never its reply: it then closes
// every connection and stops listening, as a server that ran a request
// and went down before answering does (a restart). The client's next dial
// is refused.
type dyingProxy struct {
	ln      net.Listener
	backend string
	cut     atomic.Bool
	mu      sync.Mutex
	conns   []net.Conn
	died    chan struct{}
	once    sync.Once
}

func newDyingProxy(t *testing.T, backend string) *dyingProxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	p := &dyingProxy{ln: ln, backend: backend, died: make(chan struct{})}
	t.Cleanup(p.die)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

func (p *dyingProxy) die() {
	p.once.Do(func() {
		close(p.died)
		_ = p.ln.Close()
		p.mu.Lock()
		for _, c := range p.conns {
			_ = c.Close()
		}
		p.mu.Unlock()
	})
}

func (p *dyingProxy) serve(c net.Conn) {
	s, err := net.Dial("tcp", p.backend)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, s)
	p.mu.Unlock()
	select {
	case <-p.died:
		p.die()
		return
	default:
	}
	go func() { _, _ = io.Copy(s, c) }()
	buf := make([]byte, 64<<10)
	for {
		n, err := s.Read(buf)
		if n > 0 {
			if p.cut.Load() {
				p.die() // the request ran; its reply is never delivered
				return
			}
			if _, err := c.Write(buf[:n]); err != nil {
				return
			}
		}
		if err != nil {
			_ = c.Close()
			return
		}
	}
}

// A server that runs a claim and goes down before its reply is delivered
// (a restart) leaves the claim's outcome unknown: the job is running under
// the claim's token. go-redis retries the EOF itself (MaxRetries, 3 by
// default) and its last attempt's dial is refused, so the broker sees a
// refused dial, which replyLost reads as "nothing ran": Claim answers a
// plain dial error, not an *OutcomeUnknownError naming its request id, so
// its caller cannot re-ask, and the job waits for the reaper, which
// charges it the attempt (invariant 9: a lost reply never costs a job an
// attempt).
func testResendAfterRestartSaysUnknown(t *testing.T, nb NewBackend) {
	be := nb(t)
	direct, ok := be.Client.(*redis.Client)
	if !ok {
		t.Skip("needs a single server's address")
	}
	proxy := newDyingProxy(t, direct.Options().Addr)
	opts := *direct.Options()
	opts.Addr = proxy.ln.Addr().String()
	opts.MaxRetries = 3 // go-redis's default
	client := redis.NewClient(&opts)
	t.Cleanup(func() { _ = client.Close() })
	be.Client = client
	s, _ := on(t, be)
	t.Cleanup(func() { deletePrefix(direct, s.b.Prefix()) }) // the proxy is gone by then

	id := s.enqueue(t, broker.Job{MaxAttempts: 1}) // loads the scripts, registers the queue
	if _, err := s.b.Inspector().Counts(s.ctx, s.q); err != nil {
		t.Fatalf("Counts: %v", err)
	}
	if _, err := s.b.Leases().ClaimRequest(s.ctx, broker.NewRequestID(), "warm", 0, long); err != nil {
		t.Fatalf("warm the claim script: %v", err)
	}
	proxy.cut.Store(true)
	_, err := s.b.Leases().Claim(s.ctx, s.q, 1, long)
	ran, jerr := broker.New(direct, broker.Options{Prefix: s.b.Prefix()})
	if jerr != nil {
		t.Fatal(jerr)
	}
	info, jerr := ran.Inspector().Job(context.Background(), s.q, id)
	if jerr != nil {
		t.Fatalf("Job: %v", jerr)
	}
	if info.State != broker.StateRunning {
		t.Fatalf("the claim did not run on the server (job %s); the test did not reproduce a lost reply", info.State)
	}
	var unknown *broker.OutcomeUnknownError
	if !errors.As(err, &unknown) || unknown.RequestID == "" {
		t.Fatalf("Claim that ran on a server which then went down answered %v (%T); want an *OutcomeUnknownError naming its request id: "+
			"job %s is running under a claim nobody can ask for, and the reaper will charge it its one attempt", err, err, id)
	}
}
