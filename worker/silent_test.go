package worker_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// silentProxy forwards TCP connections to addr, and drops every reply
// while silent is set: a server that reads its requests and never answers.
func silentProxy(t *testing.T, addr string) (proxy string, silent *atomic.Bool) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	silent = &atomic.Bool{}
	var conns sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", addr)
			if err != nil {
				_ = c.Close()
				continue
			}
			conns.Add(2)
			go func() { defer conns.Done(); _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() {
				defer conns.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				for {
					n, err := up.Read(buf)
					if err != nil {
						return
					}
					if !silent.Load() {
						if _, err := c.Write(buf[:n]); err != nil {
							return
						}
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), silent
}

// go-redis ends a read at its read timeout, not when the call's context is
// cancelled: a service's stop alone cannot cut short a call sent to a
// server that went silent. This is why maintenance does not wait for its
// reap or trim once stopped (detached, in maintenance.go). If this test fails,
// go-redis has begun to honour cancellation mid-read.
func TestRedisClientIgnoresCancelMidRead(t *testing.T) {
	mr := miniredis.RunT(t)
	addr, silent := silentProxy(t, mr.Addr())
	const readTimeout = 600 * time.Millisecond
	c := redis.NewClient(&redis.Options{Addr: addr, ReadTimeout: readTimeout, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	silent.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	began := time.Now()
	err := c.Get(ctx, "k").Err()
	took := time.Since(began)
	if err == nil {
		t.Fatal("a silent server answered")
	}
	if took < readTimeout*3/4 {
		t.Fatalf("the call ended %v after it was sent (cancelled at 20ms; read timeout %v): go-redis honours cancellation mid-read now (%v)", took, readTimeout, err)
	}
}

// silentBatch is the ReapBatch of the test below: a script call whose last
// argument it is (a reap, or a trim's first step) meets a silent server.
const silentBatch = 78

// silentMaintenance holds every maintenance script call for up to a read
// timeout of 30s, whatever its context says: a server that accepted the
// call and went silent, under a client that ends a read only at its
// read timeout.
type silentMaintenance struct {
	once    sync.Once
	ran     chan struct{}
	release chan struct{}
}

func (h *silentMaintenance) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *silentMaintenance) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *silentMaintenance) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		args := cmd.Args()
		switch cmd.Name() {
		case "fcall", "evalsha", "eval":
			if len(args) > 0 && args[len(args)-1] == silentBatch {
				h.once.Do(func() { close(h.ran) })
				select {
				case <-time.After(30 * time.Second):
				case <-h.release:
				}
				cmd.SetErr(context.DeadlineExceeded)
				return cmd.Err()
			}
		}
		return next(ctx, cmd)
	}
}

// Shutdown returns soon after its ctx ends even while a reap waits on a
// silent server: maintenance does not wait for a reap once it is stopped.
func TestShutdownWhileReapSilent(t *testing.T) {
	h := &silentMaintenance{ran: make(chan struct{}), release: make(chan struct{})}
	t.Cleanup(func() { close(h.release) })
	cfg := worker.Config{Logger: slog.New(slog.DiscardHandler), PollInterval: 10 * time.Millisecond, LeaseDuration: 60 * time.Millisecond, ReapBatch: silentBatch}
	_, p, _ := fusedRig(t, 0, cfg, func(context.Context, *handlers.Job) error { return nil }, h)
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.ran:
	case <-time.After(10 * time.Second):
		t.Fatal("no reap in 10s")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Shutdown(ctx)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Shutdown has not returned 5s after its ctx ended while a reap waits on a silent server")
	}
}
