package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// startServer runs a private redis-server on a free loopback port for one
// test (so that pausing or reconfiguring it disturbs no other test) and
// stops it at the end. Extra arguments are passed to redis-server.
func startServer(t *testing.T, args ...string) *redis.Client {
	t.Helper()
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not installed: %v", err)
		}
		t.Skipf("SKIP: redis-server not installed: %v", err)
	}
	port := freePort(t)
	argv := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", t.TempDir()}, args...)
	cmd := exec.Command(path, argv...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	t.Cleanup(func() { _ = c.Close() })
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c.Ping(context.Background()).Err() == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on port %d did not answer", port)
		}
	}
}

// freePort answers a loopback port that is free, and whose +10000 (a
// Redis Cluster node's bus port) is free too.
func freePort(t *testing.T) int {
	t.Helper()
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			_ = l.Close()
			continue
		}
		bus, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port+10000))
		_ = l.Close()
		if err == nil {
			_ = bus.Close()
			return port
		}
	}
	t.Fatal("no free port pair for redis-server")
	return 0
}
