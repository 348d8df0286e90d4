package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/internal/version"
)

func TestVersionCommand(t *testing.T) {
	for _, args := range [][]string{{"version"}, {"--version"}, {"-version"}} {
		code, out, errOut := runBare(args...)
		want := "workerd (fenceq " + version.String() + ", go"
		if code != 0 || errOut != "" || !strings.HasPrefix(out, want) || strings.Count(out, "\n") != 1 {
			t.Errorf("workerd %v: exit %d, stdout %q, stderr %q; want 0 and one line starting %q", args, code, out, errOut, want)
		}
	}
	if code, _, errOut := runBare("version", "extra"); code != 2 || !strings.Contains(errOut, "unexpected arguments: extra") {
		t.Errorf("version extra: exit %d, stderr %q", code, errOut)
	}
}

// The start logs of run and dev say which fenceq runs.
func TestStartLogsCarryTheVersion(t *testing.T) {
	c := newCLI(t)
	cfg := writeConfig(t, `
http: "off"
pools:
  - queues: [q]
handlers:
  noop:
    exec: {command: ["true"]}
`)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs := newLineWatch()
	done := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: &bytes.Buffer{}, stderr: logs, getenv: func(string) string { return "" }}
		done <- run(ctx, e, []string{"run", "--config", cfg, "--redis", c.url, "--log-format", "json"})
	}()
	var rec struct{ Version string }
	if err := json.Unmarshal([]byte(logs.wait(t, `"workerd running"`)), &rec); err != nil || rec.Version != version.String() {
		t.Errorf("run's start log: version %q (%v); want %q", rec.Version, err, version.String())
	}
	cancel()
	<-done

	out, dlogs := newLineWatch(), newLineWatch()
	dctx, dcancel := context.WithCancel(context.Background())
	defer dcancel()
	ddone := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: out, stderr: dlogs, getenv: func(string) string { return "" }}
		ddone <- run(dctx, e, []string{"dev", "--jobs", "0", "--exit-after", "200ms", "--log-format", "json", "--log-level", "info"})
	}()
	if line := out.wait(t, "embedded Redis at"); !strings.Contains(line, "(fenceq "+version.String()+")") {
		t.Errorf("dev's first line %q does not name the version", line)
	}
	if err := json.Unmarshal([]byte(dlogs.wait(t, `"workerd dev starting"`)), &rec); err != nil || rec.Version != version.String() {
		t.Errorf("dev's start log: version %q (%v); want %q", rec.Version, err, version.String())
	}
	<-ddone
}

// JSON logs write a duration as text, "1.5s", not nanoseconds, also
// inside a group.
func TestJSONLogDurationsAreText(t *testing.T) {
	var buf bytes.Buffer
	log, err := (&logFlags{format: "json", level: "info"}).logger(&buf)
	if err != nil {
		t.Fatal(err)
	}
	log.Info("x", slog.Duration("backoff", 1500*time.Millisecond), slog.Group("job", slog.Duration("ran", 2*time.Minute)), "any", 250*time.Millisecond)
	var rec struct {
		Backoff any
		Job     struct{ Ran any }
		Any     any
	}
	if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec.Backoff != "1.5s" || rec.Job.Ran != "2m0s" || rec.Any != "250ms" {
		t.Fatalf("durations %#v %#v %#v in %s; want \"1.5s\", \"2m0s\", \"250ms\"", rec.Backoff, rec.Job.Ran, rec.Any, buf.String())
	}
}
