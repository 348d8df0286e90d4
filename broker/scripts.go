package broker

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/scripts/lua"
)

// A script is one atomic operation, sent one of two ways (functions.go
// chooses): as a function of fenceq's FUNCTION library, loaded once per
// server and called by FCALL (Redis 7 and later), or as a script of its own
// by EVALSHA (Redis 6, miniredis, a user without FUNCTION). Both run the
// same Lua: the key names (scriptKeys), lib.lua, the pieces it uses, then
// its own file, which starts with begin(ARGV).
type script struct {
	name string        // the operation: its file's name without .lua
	fn   string        // its function in the library: <library>_<name>
	eval *redis.Script // the EVALSHA path's script
}

// scripts are the atomic operations and the library that holds them all.
type scripts struct {
	enqueue, claim, renew, progress, ack, fail, release, releaseUnowned, reap, cancel, retry, trim, del, purge, promote, wait, leases, rangeAfter, browse, overview, throughput, checkOne, checkGroups, limits, glimits, groups *script

	list []*script // every one of the above, as loadScripts made them

	// library is the FUNCTION LOAD source of every operation, libName its
	// name: "fenceq_" and a hash of the source, so that two fenceq versions
	// (dev builds too) on one server keep their own functions side by side.
	library, libName string
}

// pieces are the library files an operation runs besides lib.lua.
var pieces = map[string][]string{
	"claim": {"take.lua"},
	"ack":   {"take.lua"},
	"fail":  {"take.lua"},
}

// functionFlags are the flags of the library's functions (Redis 7): the
// ones that only read are no-writes, which Redis runs when it is out of
// memory (as it ran the same scripts by EVALSHA, which declared nothing);
// trim, which only deletes what retention lets go, and purge and delete,
// an operator's way to free memory (each writes one small record for its
// re-send), are allow-oom for the same reason. The others declare nothing: Redis refuses them whole when
// it is out of memory, before they write anything.
var functionFlags = map[string]string{
	"browse": "no-writes", "range": "no-writes", "leases": "no-writes", "overview": "no-writes",
	"throughput": "no-writes", "check_one": "no-writes", "check_groups": "no-writes", "groups": "no-writes",
	"trim": "allow-oom", "purge": "allow-oom", "delete": "allow-oom",
}

// versionMark stands for the library's version in its source until the
// version, a hash of the rest, is known.
const versionMark = "@FENCEQ_VERSION@"

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
	lib = scriptKeys() + scriptFields() + "\n-- lib.lua\n" + lib
	var s scripts
	ops := map[string]**script{
		"enqueue": &s.enqueue, "claim": &s.claim, "renew": &s.renew, "progress": &s.progress,
		"ack": &s.ack, "fail": &s.fail, "release": &s.release, "release_unowned": &s.releaseUnowned,
		"reap": &s.reap, "cancel": &s.cancel, "retry": &s.retry, "trim": &s.trim, "delete": &s.del, "purge": &s.purge, "promote": &s.promote, "wait": &s.wait, "leases": &s.leases, "range": &s.rangeAfter, "browse": &s.browse, "overview": &s.overview,
		"throughput": &s.throughput, "check_one": &s.checkOne, "check_groups": &s.checkGroups, "limits": &s.limits, "glimits": &s.glimits, "groups": &s.groups,
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for name := range ops {
			if !yield(name) {
				return
			}
		}
	})
	// The library: lib.lua and every piece once, then each operation as
	// a function whose body is its file.
	var library strings.Builder
	library.WriteString(lib)
	var libPieces []string
	for _, name := range names {
		for _, p := range pieces[name] {
			if !slices.Contains(libPieces, p) {
				libPieces = append(libPieces, p)
			}
		}
	}
	for _, p := range libPieces {
		part, err := read(p)
		if err != nil {
			return nil, err
		}
		library.WriteString("\n-- " + p + "\n" + part)
	}
	bodies := map[string]string{}
	for _, name := range names {
		body, err := read(name + ".lua")
		if err != nil {
			return nil, err
		}
		bodies[name] = body
		flags := ""
		if f := functionFlags[name]; f != "" {
			flags = fmt.Sprintf("flags = {'%s'}, ", f)
		}
		fmt.Fprintf(&library, "\n-- %s.lua\nredis.register_function{function_name = 'fenceq_%s_%s', %scallback = function(KEYS, ARGV)\nbegin(ARGV)\n%s\nend}\n",
			name, versionMark, name, flags, body)
	}
	sum := sha1.Sum([]byte(library.String()))
	version := hex.EncodeToString(sum[:6])
	s.libName = "fenceq_" + version
	s.library = "#!lua name=" + s.libName + "\n" + strings.ReplaceAll(library.String(), versionMark, version)

	for _, name := range names {
		src := lib
		for _, f := range pieces[name] {
			part, err := read(f)
			if err != nil {
				return nil, err
			}
			src += "\n-- " + f + "\n" + part
		}
		src += "\n-- " + name + ".lua\nbegin(ARGV)\n" + bodies[name]
		sc := &script{name: name, fn: s.libName + "_" + name, eval: redis.NewScript(src)}
		*ops[name] = sc
		s.list = append(s.list, sc)
	}
	return &s, nil
}

// all is every script, from the one table loadScripts fills them from (a
// second list of them could miss a new one).
func (s *scripts) all() []*script { return s.list }
