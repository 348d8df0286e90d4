package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestUITokenTooShort: an admin token a guesser could find in a few tries
// (under 16 bytes) stops workerd ui and workerd run at start, from the
// flag, the environment or the config, with exit 2 and a message saying
// what was wrong, where it came from and how to make a good one, without
// repeating the token.
func TestUITokenTooShort(t *testing.T) {
	c := newCLI(t)
	c.ok("", "enqueue", "mail", "send", "--id", "j1")
	const short = "s3cret-15-bytes"
	cfg := filepath.Join(t.TempDir(), "workerd.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("http: %s\nui_token: %s\npools:\n  - queues: [q]\nhandlers:\n  k:\n    exec: {command: [\"true\"]}\n", uiFreeAddr(t), short)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, from string
		env        map[string]string
		args       []string
	}{
		{"flag", "--ui-token", nil, []string{"ui", "--addr", "127.0.0.1:0", "--ui-token", short}},
		{"flag of one byte", "--ui-token", nil, []string{"ui", "--addr", "127.0.0.1:0", "--ui-token", "a"}},
		{"env", "FENCEQ_UI_TOKEN", map[string]string{"FENCEQ_UI_TOKEN": short}, []string{"ui", "--addr", "127.0.0.1:0"}},
		{"config", "ui_token", nil, []string{"run", "--config", cfg}},
		{"run env", "FENCEQ_UI_TOKEN", map[string]string{"FENCEQ_UI_TOKEN": short}, []string{"run", "--config", cfg}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A command that accepts the token serves until the context ends.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			e := &env{stdin: strings.NewReader(""), stdout: &out, stderr: &errOut, getenv: func(k string) string { return tc.env[k] }}
			code := run(ctx, e, append(tc.args, "--redis", c.url))
			msg := errOut.String()
			if code != 2 || !strings.Contains(msg, "at least 16 bytes") || !strings.Contains(msg, tc.from) || !strings.Contains(msg, "openssl rand -hex 16") {
				t.Errorf("workerd %s with a short admin token: exit %d, want 2 saying it needs at least 16 bytes, from %s, and how to make one:\n%s%s", tc.args[0], code, tc.from, out.String(), msg)
			}
			if strings.Contains(msg, short) {
				t.Errorf("the error repeats the token:\n%s", msg)
			}
		})
	}
}
