package broker

import (
	"errors"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"
)

// serverError is an error reply, as go-redis hands one back.
type serverError string

func (e serverError) Error() string { return string(e) }
func (serverError) RedisError()     {}

var _ redis.Error = serverError("")

// The broker falls back to EVALSHA on exactly the answers that say the
// server or the user has no FUNCTION, loads the library on exactly the one
// that says it is missing, and takes every other error, a script's own
// included, for what it is.
func TestFunctionAnswers(t *testing.T) {
	for _, tc := range []struct {
		err                  error
		unsupported, missing bool
	}{
		{serverError("ERR unknown command 'FCALL', with args beginning with: 'fenceq_x_ack' '1' "), true, false}, // Redis 6
		{serverError("ERR unknown command `fcall`, with args beginning with: "), true, false},                    // miniredis
		{serverError("ERR unknown command `function`, with args beginning with: `load` "), true, false},
		{serverError("NOPERM this user has no permissions to run the 'fcall' command"), true, false},
		{serverError("NOPERM User u has no permissions to run the 'function|load' command"), true, false},
		{serverError("ERR Function not found"), false, true},
		{fmt.Errorf("fenceq: %w", serverError("ERR Function not found")), false, true},
		{serverError("NOPERM this user has no permissions to access one of the keys used as arguments"), false, false},
		{serverError("ERR unknown command 'foo', with args beginning with: "), false, false},
		{serverError("ERR user_function:12: Script attempted to access nonexistent global variable 'x'"), false, false},
		{serverError("OOM command not allowed when used memory > 'maxmemory'."), false, false},
		{errors.New("dial tcp: connection refused (Function not found)"), false, false}, // not a reply
	} {
		if got := functionsUnsupported(tc.err); got != tc.unsupported {
			t.Errorf("functionsUnsupported(%q) = %v", tc.err, got)
		}
		if got := functionMissing(tc.err); got != tc.missing {
			t.Errorf("functionMissing(%q) = %v", tc.err, got)
		}
		if got := notRun(tc.err); got != (tc.unsupported || tc.missing) {
			t.Errorf("notRun(%q) = %v", tc.err, got)
		}
	}
}
