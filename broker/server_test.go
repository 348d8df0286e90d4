package broker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// redisErr is a server error reply, as go-redis hands them out.
type redisErr string

func (e redisErr) Error() string { return string(e) }
func (redisErr) RedisError()     {}

func TestIsTransient(t *testing.T) {
	for _, err := range []error{
		context.DeadlineExceeded, redis.ErrPoolTimeout, io.EOF,
		&net.OpError{Op: "dial", Err: errors.New("connection refused")},
		redisErr("LOADING Redis is loading the dataset in memory"),
		redisErr("READONLY You can't write against a read only replica."),
		fmt.Errorf("fenceq: ack: %w", redisErr("CLUSTERDOWN The cluster is down")),
	} {
		if !broker.IsTransient(err) {
			t.Errorf("IsTransient(%v) = false", err)
		}
	}
	for _, err := range []error{
		errors.New("fenceq: invalid queue"), redisErr("ERR Error running script"),
		redisErr("NOPERM this user has no permissions"),
	} {
		if broker.IsTransient(err) {
			t.Errorf("IsTransient(%v) = true", err)
		}
	}
}

// On a server that answers neither INFO nor CONFIG GET (miniredis), the
// server check passes and says which reads it could not make; a server
// that cannot be reached is refused, with what to check.
func TestCheckServer(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.CheckServer(context.Background())
	if err != nil {
		t.Fatalf("CheckServer on miniredis: %v", err)
	}
	if s.MaxMemoryPolicy != "" || s.PolicyErr == nil || s.Evicts() {
		t.Fatalf("CheckServer on miniredis: %+v, want an unread policy and why", s)
	}

	gone := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = gone.Close() })
	b, err = broker.New(gone, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.CheckServer(context.Background())
	if !errors.Is(err, broker.ErrUnreachable) || !strings.Contains(err.Error(), "cannot reach Redis") || !broker.IsTransient(err) {
		t.Fatalf("CheckServer without a server: %v, want ErrUnreachable, transient", err)
	}
}
