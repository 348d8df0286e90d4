package broker

import (
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/scripts/lua"
)

// scripts are the atomic operations, each the key names (scriptKeys), then
// lib.lua, the pieces it uses and its own file.
type scripts struct {
	enqueue, claim, renew, progress, ack, fail, release, releaseUnowned, reap, cancel, retry, trim, wait, leases, rangeAfter, browse, overview, throughput, checkOne, limits *redis.Script

	list []*redis.Script // every one of the above, as loadScripts made them
}

// pieces are the library files an operation runs besides lib.lua.
var pieces = map[string][]string{
	"claim": {"take.lua"},
	"ack":   {"take.lua"},
	"fail":  {"take.lua"},
}

func loadScripts() (*scripts, error) {
	read := func(name string) (string, error) {
		src, err := lua.FS.ReadFile(name)
		if err != nil {
			return "", fmt.Errorf("fenceq: read embedded %s: %w", name, err)
		}
		return string(src), nil
	}
	lib, err := read("lib.lua")
	if err != nil {
		return nil, err
	}
	lib = scriptKeys() + "\n-- lib.lua\n" + lib
	var s scripts
	for name, dst := range map[string]**redis.Script{
		"enqueue": &s.enqueue, "claim": &s.claim, "renew": &s.renew, "progress": &s.progress,
		"ack": &s.ack, "fail": &s.fail, "release": &s.release, "release_unowned": &s.releaseUnowned,
		"reap": &s.reap, "cancel": &s.cancel, "retry": &s.retry, "trim": &s.trim, "wait": &s.wait, "leases": &s.leases, "range": &s.rangeAfter, "browse": &s.browse, "overview": &s.overview,
		"throughput": &s.throughput, "check_one": &s.checkOne, "limits": &s.limits,
	} {
		src := lib
		for _, f := range append(pieces[name], name+".lua") {
			part, err := read(f)
			if err != nil {
				return nil, err
			}
			src += "\n-- " + f + "\n" + part
		}
		*dst = redis.NewScript(src)
		s.list = append(s.list, *dst)
	}
	return &s, nil
}

// all is every script, from the one table loadScripts fills them from (a
// second list of them could miss a new one).
func (s *scripts) all() []*redis.Script { return s.list }
