package integration

import (
	"net"
	"sync"
	"testing"
	"time"
)

// faultProxy forwards TCP connections to a target and can break them: drop
// closes every open connection, stall stops forwarding for a while (a
// network partition that keeps sockets open).
type faultProxy struct {
	ln     net.Listener
	target string

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	stalled chan struct{} // closed while traffic flows; replaced during a stall
}

func startProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, stalled: closedChan()}
	go p.accept()
	t.Cleanup(func() { _ = ln.Close(); p.drop() })
	return p
}

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

func (p *faultProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.serve(c)
	}
}

func (p *faultProxy) serve(c net.Conn) {
	u, err := net.DialTimeout("tcp", p.target, time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.pipe(u, c) }()
	go func() { defer wg.Done(); p.pipe(c, u) }()
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// pipe copies src to dst, waiting out stalls, until either side closes.
func (p *faultProxy) pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			gate := p.stalled
			p.mu.Unlock()
			<-gate
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// drop closes every connection passing through.
func (p *faultProxy) drop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		_ = c.Close()
	}
}

// stall holds all traffic for d, then lets it flow again.
func (p *faultProxy) stall(d time.Duration) {
	gate := make(chan struct{})
	p.mu.Lock()
	p.stalled = gate
	p.mu.Unlock()
	time.Sleep(d)
	close(gate)
}
