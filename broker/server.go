package broker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MinRedisMajor.MinRedisMinor is the oldest Redis fenceq runs on: 6.2
// brought RPOP with a count, which a claim pops the ready list (ready0)
// with, and 6.0 the fractional BLPOP timeouts WaitForWork blocks with (so
// that an idle pool picks up a new job in about a millisecond) and LPOS,
// which Check and the listings find a list entry with. fenceq is tested on
// 7.0, where every operation is a FUNCTION (on 6.2, EVALSHA).
const MinRedisMajor, MinRedisMinor = 6, 2

var (
	// ErrUnreachable is wrapped by CheckServer's error when the server does
	// not answer PING.
	ErrUnreachable = errors.New("cannot reach Redis")
	// ErrServerTooOld is wrapped by CheckServer's error when the server is
	// older than MinRedisMajor.MinRedisMinor.
	ErrServerTooOld = errors.New("redis server too old")
)

// ServerInfo is what a Redis server says about itself that decides whether
// fenceq can run on it safely. A field the server does not answer (as on
// miniredis, or under an ACL that denies INFO or CONFIG) is empty, and its
// error says why: a check that cannot be made is skipped, never failed.
type ServerInfo struct {
	// Version is redis_version from INFO server; "" when unread.
	Version    string
	VersionErr error
	// MaxMemoryPolicy is maxmemory-policy from CONFIG GET, or from INFO
	// memory where CONFIG is denied; "" when neither answers. Anything but
	// "noeviction" lets Redis evict job hashes and leases when memory runs
	// out, and those jobs are lost.
	MaxMemoryPolicy string
	PolicyErr       error
}

// Evicts reports whether the server's policy may evict keys when memory
// runs out. An unread policy is not known to evict.
func (s ServerInfo) Evicts() bool {
	return s.MaxMemoryPolicy != "" && s.MaxMemoryPolicy != "noeviction"
}

// CheckServer reaches the server and reads what ServerInfo holds. It
// refuses, with an error wrapping ErrUnreachable, a server that does not
// answer PING, and, wrapping ErrServerTooOld, one that reports a version
// older than MinRedisMajor.MinRedisMinor. It writes nothing. On a Cluster
// the answers come from whichever node the client picks.
func (b *Broker) CheckServer(ctx context.Context) (ServerInfo, error) {
	if err := b.rdb.Ping(ctx).Err(); err != nil {
		return ServerInfo{}, fmt.Errorf("fenceq: %w: %w; check that it is running and that the address, password and TLS settings are right", ErrUnreachable, err)
	}
	var s ServerInfo
	if info, err := b.rdb.Info(ctx, "server").Result(); err != nil {
		s.VersionErr = err
	} else {
		s.Version = infoField(info, "redis_version")
	}
	if err := checkVersion(s.Version); err != nil {
		return s, err
	}
	if kv, err := b.rdb.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil {
		s.MaxMemoryPolicy = kv["maxmemory-policy"]
	} else if info, ierr := b.rdb.Info(ctx, "memory").Result(); ierr == nil {
		s.MaxMemoryPolicy = infoField(info, "maxmemory_policy")
	} else {
		s.PolicyErr = errors.Join(err, ierr)
	}
	return s, nil
}

// checkVersion refuses a server older than MinRedisMajor.MinRedisMinor; an
// empty version (not reported) passes.
func checkVersion(v string) error {
	if v == "" {
		return nil
	}
	major, minor := parseVersion(v)
	if major < MinRedisMajor || major == MinRedisMajor && minor < MinRedisMinor {
		return &refusal{ErrServerTooOld, fmt.Sprintf("fenceq: Redis %s is too old: fenceq needs Redis %d.%d or newer; upgrade the server", v, MinRedisMajor, MinRedisMinor)}
	}
	return nil
}

// refusal is an error whose message is written for the person who has to
// act on it, matched with errors.Is by its sentinel.
type refusal struct {
	sentinel error
	msg      string
}

func (e *refusal) Error() string { return e.msg }
func (e *refusal) Unwrap() error { return e.sentinel }

func parseVersion(v string) (major, minor int) {
	parts := strings.SplitN(v, ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}

// infoField is one "name:value" line of an INFO reply: the one INFO parser
// of fenceq.
func infoField(info, name string) string {
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}
