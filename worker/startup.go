package worker

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// MinRedisMajor.MinRedisMinor is the oldest Redis the pool runs on: 6.0
// brought the fractional BLPOP timeouts an idle pool blocks with (so that it
// picks up a new job in about a millisecond). The scripts need 5.0 (ZPOPMIN,
// effects replication of TIME); fenceq is tested on 7.0.
const MinRedisMajor, MinRedisMinor = 6, 0

// checkServer refuses a server the pool cannot work with and warns about
// settings that can lose jobs. A check the server does not support (as on
// miniredis) is skipped, never failed.
func checkServer(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger) error {
	if err := rdb.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("fenceq: cannot reach Redis: %w; check that it is running and that the address, password and TLS settings are right", err)
	}
	if info, err := rdb.Info(ctx, "server").Result(); err != nil {
		log.Debug("fenceq cannot read the Redis version; not checking it", slog.Any("error", err))
	} else if err := checkVersion(infoField(info, "redis_version")); err != nil {
		return err
	}
	policy := ""
	if kv, err := rdb.ConfigGet(ctx, "maxmemory-policy").Result(); err == nil {
		policy = kv["maxmemory-policy"]
	} else if info, err := rdb.Info(ctx, "memory").Result(); err == nil {
		policy = infoField(info, "maxmemory_policy")
	}
	switch policy {
	case "":
		log.Debug("fenceq cannot read maxmemory-policy; not checking it")
	case "noeviction":
	default:
		log.Warn("fenceq: Redis maxmemory-policy is not noeviction: when memory runs out Redis may EVICT job hashes and leases, and those jobs are LOST. Set maxmemory-policy noeviction.",
			slog.String("maxmemory_policy", policy))
	}
	return nil
}

// checkVersion refuses a server older than MinRedisMajor.MinRedisMinor; an
// empty version (not reported) passes.
func checkVersion(v string) error {
	if v == "" {
		return nil
	}
	major, minor := parseVersion(v)
	if major < MinRedisMajor || major == MinRedisMajor && minor < MinRedisMinor {
		return fmt.Errorf("fenceq: Redis %s is too old: fenceq needs Redis %d.%d or newer; upgrade the server", v, MinRedisMajor, MinRedisMinor)
	}
	return nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func parseVersion(v string) (major, minor int) {
	parts := strings.SplitN(v, ".", 3)
	major, _ = strconv.Atoi(parts[0])
	if len(parts) > 1 {
		minor, _ = strconv.Atoi(parts[1])
	}
	return major, minor
}
