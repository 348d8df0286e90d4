package integration

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	redisAddr = cmp.Or(os.Getenv("FENCEQ_REDIS_ADDR"), "127.0.0.1:6379")
	// unreachable is why the real-Redis tests cannot run, or "".
	unreachable string
)

func TestMain(m *testing.M) {
	// The chaos and failover tests restart servers on purpose: go-redis's
	// own dial-retry lines would bury the tests' output.
	redis.SetLogger(quietLogger{})
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	err := c.Ping(ctx).Err()
	cancel()
	_ = c.Close()
	if err != nil {
		unreachable = fmt.Sprintf("no Redis at %s (%v)", redisAddr, err)
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "FAIL: integration tests need Redis under CI=true: %s\n", unreachable)
			os.Exit(1)
		}
		warn(fmt.Sprintf("\n*** SKIPPING real-Redis tests: %s.\n*** Start one (redis-server --port 6379) or set FENCEQ_REDIS_ADDR.\n\n", unreachable))
	}
	os.Exit(m.Run())
}

// client connects to the real Redis, or skips the test when there is none.
func client(t testing.TB) redis.UniversalClient {
	t.Helper()
	if unreachable != "" {
		t.Skipf("SKIP (real Redis): %s", unreachable)
	}
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// warn writes to stderr and, since go test hides a passing package's output,
// to the terminal directly when there is one, so a skip is never silent.
func warn(msg string) {
	fmt.Fprint(os.Stderr, msg)
	if tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0); err == nil {
		fmt.Fprint(tty, msg)
		_ = tty.Close()
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
