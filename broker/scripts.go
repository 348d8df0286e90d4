package broker

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/scripts/lua"
)

// scripts are the atomic operations, each lib.lua followed by its own file.
type scripts struct {
	enqueue, claim, renew, progress, ack, fail, release, releaseUnowned, reap, cancel, retry, trim, wait, leases, overview *redis.Script
}

func loadScripts() (*scripts, error) {
	lib, err := lua.FS.ReadFile("lib.lua")
	if err != nil {
		return nil, fmt.Errorf("fenceq: read embedded lib.lua: %w", err)
	}
	var s scripts
	for name, dst := range map[string]**redis.Script{
		"enqueue": &s.enqueue, "claim": &s.claim, "renew": &s.renew, "progress": &s.progress,
		"ack": &s.ack, "fail": &s.fail, "release": &s.release, "release_unowned": &s.releaseUnowned,
		"reap": &s.reap, "cancel": &s.cancel, "retry": &s.retry, "trim": &s.trim, "wait": &s.wait, "leases": &s.leases, "overview": &s.overview,
	} {
		src, err := lua.FS.ReadFile(name + ".lua")
		if err != nil {
			return nil, fmt.Errorf("fenceq: read embedded %s.lua: %w", name, err)
		}
		*dst = redis.NewScript(string(lib) + "\n-- " + name + ".lua\n" + string(src))
	}
	return &s, nil
}

func (s *scripts) all() []*redis.Script {
	return []*redis.Script{s.enqueue, s.claim, s.renew, s.progress, s.ack, s.fail, s.release,
		s.releaseUnowned, s.reap, s.cancel, s.retry, s.trim, s.wait, s.leases, s.overview}
}
