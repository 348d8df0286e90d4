package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// runWith runs one command as given, without cli's --redis.
func runWith(args ...string) (int, string, string) {
	var out, errOut bytes.Buffer
	e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(string) string { return "" }}
	code := run(context.Background(), e, args)
	return code, out.String(), errOut.String()
}

// --redis takes host:port as redis-cli does, as well as a URL; anything
// else is a configuration error that says what to write.
func TestRedisAddressForms(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.ok("", "enqueue", "q", "k", "--id", "j")
	for _, addr := range []string{c.mr.Addr(), "redis://" + c.mr.Addr(), "redis://" + c.mr.Addr() + "/0"} {
		if code, out, errOut := runWith("inspect", "--redis", addr); code != 0 || !strings.Contains(out, "q") {
			t.Errorf("inspect --redis %s: exit %d\n%s%s", addr, code, out, errOut)
		}
	}
	for _, bad := range []string{"a b:6379", "http://" + c.mr.Addr(), "[::1", "redis://" + c.mr.Addr() + "/x"} {
		code, _, errOut := runWith("inspect", "--redis", bad)
		if code != 2 || !strings.Contains(errOut, "bad Redis address "+`"`+bad+`"`) || !strings.Contains(errOut, "write host:port, redis://") {
			t.Errorf("--redis %q: exit %d, %q; want 2 and a message naming it and the forms to write", bad, code, errOut)
		}
		if strings.Contains(errOut, `"redis://`+bad) {
			t.Errorf("--redis %q: the message quotes the URL workerd made of it: %q", bad, errOut)
		}
	}
}
