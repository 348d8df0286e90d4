package worker_test

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
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
