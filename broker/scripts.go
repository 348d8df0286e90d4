package broker

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/scripts/lua"
)

// scripts are the atomic operations, each lib.lua followed by its own file.
type scripts struct {
	enqueue, claim, renew, progress, ack, fail, release, releaseUnowned, reap, cancel, retry, expired *redis.Script
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
		"reap": &s.reap, "cancel": &s.cancel, "retry": &s.retry, "expired": &s.expired,
	} {
		src, err := lua.FS.ReadFile(name + ".lua")
		if err != nil {
			return nil, fmt.Errorf("fenceq: read embedded %s.lua: %w", name, err)
		}
		*dst = redis.NewScript(string(lib) + "\n-- " + name + ".lua\n" + string(src))
	}
	return &s, nil
}
