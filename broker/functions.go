package broker

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"
)

// The broker sends its operations as functions of fenceq's FUNCTION
// library (scripts.go) where the server has FUNCTION (Redis 7 and later),
// loaded once per server instead of running lib.lua's ~70 definitions at
// every call, and by EVALSHA elsewhere (Redis 6, miniredis) or when the
// user may not use FUNCTION or FCALL. It starts with FCALL and falls back
// for good, per broker, at the first answer that the server does not know
// the command or the user may not run it; neither ran anything.
//
// A server without the library (not loaded yet, restarted without
// persistence, FUNCTION FLUSH, a new master of a Cluster) answers "Function
// not found", which also means nothing ran: the broker loads the library,
// on every master of a Cluster, and sends the call again. Any other error
// goes to the re-send logic (resend.go) as an EVALSHA's would.

// FunctionLibrary is the name of the FUNCTION library this broker loads,
// "fenceq_" and a hash of its source: FUNCTION LIST shows it, and a
// library of another version can be deleted (FUNCTION DELETE) once no
// process of that version runs. It is "" when the broker sends its
// scripts by EVALSHA, the server having no FUNCTION (or the user no right
// to it) — known from the first call on.
func (b *Broker) FunctionLibrary() string {
	if b.fnOff.Load() {
		return ""
	}
	return b.scripts.libName
}

// functionMissing reports whether err is the server's answer that the
// function called does not exist: the call did not run.
func functionMissing(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.Contains(re.Error(), "Function not found")
}

// functionsUnsupported reports whether err is the server's answer that it
// does not know FCALL or FUNCTION (Redis 6, miniredis) or that the user
// may not run them: nothing ran, and EVALSHA is the way.
func functionsUnsupported(err error) bool {
	var re redis.Error
	if !errors.As(err, &re) {
		return false
	}
	msg := strings.ToLower(re.Error())
	switch {
	case strings.HasPrefix(msg, "err unknown command"):
		return strings.Contains(msg, "fcall") || strings.Contains(msg, "function")
	case strings.HasPrefix(msg, "noperm"):
		return strings.Contains(msg, "'fcall'") || strings.Contains(msg, "'function|")
	}
	return false
}

// notRun reports whether a script call's answer says that it did not run
// and may simply be sent again (loaded first): NOSCRIPT, a missing
// function, or a server or user without FUNCTION.
func notRun(err error) bool {
	return redis.HasErrorPrefix(err, "NOSCRIPT") || functionMissing(err) || functionsUnsupported(err)
}

// eachMaster runs f on every master of a Cluster (every shard of a Ring),
// or on the one server otherwise.
func (b *core) eachMaster(ctx context.Context, f func(ctx context.Context, c redis.Cmdable) error) error {
	switch c := b.rdb.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return f(ctx, n) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return f(ctx, n) })
	}
	return f(ctx, b.rdb)
}

// loadLibraryOn loads the library into one server. A library of that name
// there already is this one: the name is a hash of the source. A server or
// user without FUNCTION turns functions off and answers nil: the caller
// goes on by EVALSHA.
func (b *core) loadLibraryOn(ctx context.Context, c redis.Cmdable) error {
	err := c.FunctionLoad(ctx, b.scripts.library).Err()
	switch {
	case err == nil || redis.HasErrorPrefix(err, "Library '"+b.scripts.libName+"' already exists"):
		return nil
	case functionsUnsupported(err):
		b.fnOff.Store(true)
		return nil
	}
	return fmt.Errorf("load FUNCTION library %s: %w", b.scripts.libName, err)
}

// loadLibrary loads the library on every master.
func (b *core) loadLibrary(ctx context.Context) error {
	return b.eachMaster(ctx, b.loadLibraryOn)
}

// runScript runs one script call, alone: by FCALL, loading the library
// when the server lacks it, or by EVALSHA (falling back to EVAL, which
// loads the script) when functions are off or the library is missing
// again right after its load.
func (b *core) runScript(ctx context.Context, s *script, keys []string, args []any) *redis.Cmd {
	if !b.fnOff.Load() {
		cmd := b.rdb.FCall(ctx, s.fn, keys, args...)
		switch err := cmd.Err(); {
		case functionsUnsupported(err):
			b.fnOff.Store(true)
		case functionMissing(err):
			if err := b.loadLibrary(ctx); err != nil {
				cmd.SetErr(fmt.Errorf("fenceq: %w", err))
				return cmd
			}
			if !b.fnOff.Load() {
				cmd = b.rdb.FCall(ctx, s.fn, keys, args...)
				if !functionMissing(cmd.Err()) {
					return cmd
				}
				// Gone again since the load (a FUNCTION FLUSH meanwhile):
				// this call goes by EVAL, which carries its source.
			}
		default:
			return cmd
		}
	}
	return s.eval.Run(ctx, b.rdb, keys, args...)
}

// queueScript adds a script call to p: by FCALL, or by EVALSHA when
// functions are off. A call that did not run (notRun) is for the caller to
// run again, with runScript or after loading.
func (b *core) queueScript(ctx context.Context, p redis.Pipeliner, s *script, keys []string, args []any) *redis.Cmd {
	if b.fnOff.Load() {
		return s.eval.EvalSha(ctx, p, keys, args...)
	}
	return p.FCall(ctx, s.fn, keys, args...)
}

// loadFor readies node to run s again after err, an answer that it did
// not run (notRun): the library loaded there, or, with functions off (err
// may have just said so), s in its script cache.
func (b *core) loadFor(ctx context.Context, node redis.Cmdable, s *script, err error) error {
	if functionsUnsupported(err) {
		b.fnOff.Store(true)
	}
	if !b.fnOff.Load() {
		if err := b.loadLibraryOn(ctx, node); err != nil || !b.fnOff.Load() {
			return err
		}
	}
	return s.eval.Load(ctx, node).Err()
}
