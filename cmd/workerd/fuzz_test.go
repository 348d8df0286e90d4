package main

import (
	"encoding/json"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"
)

// FuzzLoadConfig feeds arbitrary bytes to loadConfig as workerd.yaml. It
// must answer a config or a *configError, never panic; a config it accepts
// has a pool and a handler, every pool names its queues, every handler is
// exactly one of exec and http with exit codes from 1 to 255, every queue
// name is one the broker takes and has no spaces, every periodic payload
// is JSON, and building its handlers (what `workerd
// run` does next) answers handlers or a *configError, never a panic.
func FuzzLoadConfig(f *testing.F) {
	for _, s := range []string{
		"pools:\n  - queues: [a]\nhandlers:\n  k: {exec: {command: [true]}}\n",
		"redis: redis://127.0.0.1:6379\nprefix: p\nhttp: \"off\"\nshutdown_timeout: 10s\npools:\n  - queues: [{name: a, weight: 3}, b]\n    strict_priority: true\n    concurrency: 4\n    lease: 2s\n    poll_interval: 100ms\n    backoff: {base: 1s, max: 1m}\nhandlers:\n  k:\n    exec: {command: [true, x], dir: /tmp, env: {A: b}, permanent_exit_codes: [3], kill_grace: 1s}\n    timeout: 5s\n  h: {http: {url: \"http://127.0.0.1:1/x\", headers: {X-A: b}, timeout: 1s}}\n",
		"pools:\n  - queues: [a]\n    concurency: 3\nhandlers:\n  k: {exec: {command: [true]}}\n",
		"pools:\n  - queues: [a]\n    lease: 30\nhandlers:\n  k: {exec: {command: [true]}}\n",
		"pools:\n  - queues: [a]\nhandlers:\n  k: {exec: {dir: /tmp}}\n",
		"pools:\n  - queues: [a]\nhandlers:\n  k: {exec: {command: [true]}, http: {url: \"http://x\"}}\n",
		"pools:\n  - queues: [a]\nhandlers:\n  \"\": {exec: {command: [true]}}\n",
		"pools:\n  - queues: [a]\nhandlers:\n  k: {http: {url: \"ftp://x\"}}\n",
		"pools:\n  - queues: [\"\"]\nhandlers:\n  k: {exec: {command: [true]}}\n",
		"pools: [null]\nhandlers: {k: null}\n",
		"pools:\n  - queues: [a]\n    lease: -1s\nhandlers:\n  k: {exec: {command: [true]}}\n",
		"handlers:\n  k: {exec: {command: [true]}}\n",
		"pools:\n  - queues: [a b]\nhandlers:\n  k: {exec: {command: [true], permanent_exit_codes: [0, 300]}}\n",
		"pools:\n  - queues: [a]\nperiodic:\n  - {name: n, every: 1m, queue: a, kind: k, payload: not json}\nhandlers:\n  k: {exec: {command: [true]}}\n",
		"pools:\n  - queues: [a]\nperiodic:\n  - {name: n, every: 1m, queue: a, kind: k, payload: {1: [x, .inf]}}\nhandlers:\n  k: {exec: {command: [true]}}\n",
		"pools:\n  - queues: [a]\n   concurrency: 3\nhandlers:\n\tk: {exec: {command: true}}\n",
		"{}", "", "---\n---\n", "[1, 2]", "pools: &a [*a]\n", "a: !!binary x\n", "\t\x00\xff",
	} {
		f.Add([]byte(s))
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "workerd.yaml")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := loadConfig(path)
		if err != nil {
			var ce *configError
			if c != nil || !errors.As(err, &ce) {
				t.Fatalf("loadConfig answered (%v, %T %v); want (nil, *configError)", c, err, err)
			}
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		if c == nil {
			t.Fatal("loadConfig answered (nil, nil)")
		}
		if len(c.Pools) == 0 || len(c.Handlers) == 0 {
			t.Fatalf("accepted a config with %d pools and %d handlers", len(c.Pools), len(c.Handlers))
		}
		for i, p := range c.Pools {
			if len(p.Queues) == 0 {
				t.Fatalf("accepted pools[%d] without queues", i)
			}
			for j, q := range p.Queues {
				if q.Name == "" || strings.ContainsFunc(q.Name, unicode.IsSpace) || strings.ContainsAny(q.Name, "{}") {
					t.Fatalf("accepted pools[%d].queues[%d] named %q", i, j, q.Name)
				}
			}
			_ = p.workerConfig()
		}
		for i, pc := range c.Periodic {
			per, err := c.periodic(i, pc)
			if err != nil || !json.Valid(per.Job.Payload) {
				t.Fatalf("accepted periodic[%d], whose payload is %q (%v)", i, per.Job.Payload, err)
			}
		}
		for kind, h := range c.Handlers {
			if (h.Exec == nil) == (h.HTTP == nil) {
				t.Fatalf("accepted handler %q with exec %v and http %v", kind, h.Exec != nil, h.HTTP != nil)
			}
			if h.Exec != nil && slices.ContainsFunc(h.Exec.PermanentExitCodes, func(c int) bool { return c < 1 || c > 255 }) {
				t.Fatalf("accepted handler %q with permanent exit codes %v", kind, h.Exec.PermanentExitCodes)
			}
		}
		m, _, err := c.mux(slog.New(slog.DiscardHandler))
		if err != nil {
			var ce *configError
			if !errors.As(err, &ce) {
				t.Fatalf("mux: %T %v; want a *configError", err, err)
			}
			return
		}
		if got := len(m.Kinds()); got != len(c.Handlers) {
			t.Fatalf("mux has %d kinds, config %d handlers", got, len(c.Handlers))
		}
	})
}

// FuzzParseJSONL feeds arbitrary lines to parseJSONL. A line it accepts
// must be exactly one JSON object (a second value on the line would be a
// job silently dropped) and yield a job of queue "q" whose kind, id,
// attempts, priority, unique key and dependencies are the line's, with a
// payload that is JSON.
func FuzzParseJSONL(f *testing.F) {
	for _, s := range []string{
		`{"kind":"k"}`,
		`{"kind":"k","payload":{"a":1},"id":"x","delay":"5s","max_attempts":3,"priority":-5}`,
		`{"kind":"k","at":"2026-12-01T09:00:00Z","payload":[1,"2",null]}`,
		`{"kind":"k","payload":null}`,
		`{"kind":"k","unique_key":"u","unique_for":"1h","depends_on":["a","b"],"run_if_dependency_fails":true}`,
		`{"kind":"k","unique_for":"1"}`,
		`{"kind":"k","depends_on":"a"}`,
		`{"kind":"k","depends_on":[1,null]}`,
		`{"kind":"k","depends_on":[],"run_if_dependency_fails":"yes"}`,
		`{"kind":"k","delay":"5"}`,
		`{"kind":"k","bogus":1}`,
		`{"kind":"k","queue":"q","delay_ms":1500,"unique_key":"u","unique_for_ms":60000,"run_at_ms":1800000000000}`,
		`{"kind":"k","queue":"other"}`,
		`{"kind":"k","delay":"1s","delay_ms":1000}`,
		`{"kind":"k"} {"kind":"j"}`,
		`{"kind":"k"}garbage`,
		`{"KIND":"k","Payload":"s"}`,
		`{"kind":"\ud800\u0000"}`,
		`{"kind":1}`,
		`[]`, `null`, `"x"`, ``, `{`, "{\"kind\":\"\xff\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		j, err := parseJSONL("q", line)
		if err != nil {
			if j.Queue != "" || j.Kind != "" || j.Payload != nil {
				t.Fatalf("error %v with a job %+v", err, j)
			}
			return
		}
		var want jsonlReference
		if err := json.Unmarshal(line, &want); err != nil {
			t.Fatalf("parseJSONL accepted %q, which is not one JSON job: %v", line, err)
		}
		if j.Queue != "q" || want.Queue != "" && want.Queue != "q" {
			t.Fatalf("queue %q from a line naming %q, want q", j.Queue, want.Queue)
		}
		wantAt := want.At
		if want.RunAtMS != 0 {
			wantAt = time.UnixMilli(want.RunAtMS)
		}
		if j.Kind != want.Kind || j.ID != want.ID || j.MaxAttempts != want.MaxAttempts || j.Priority != want.Priority || !j.RunAt.Equal(wantAt) {
			t.Fatalf("job %+v from line %q (decoded %+v)", j, line, want)
		}
		if !json.Valid(j.Payload) {
			t.Fatalf("payload %q is not JSON", j.Payload)
		}
		if len(want.Payload) == 0 && string(j.Payload) != "{}" {
			t.Fatalf("payload %q for a line without one; want {}", j.Payload)
		}
		if want.Delay == "" && want.DelayMS == 0 && j.Delay != 0 {
			t.Fatalf("delay %v for a line without one", j.Delay)
		}
		if j.UniqueKey != want.UniqueKey || !slices.Equal(j.DependsOn, want.DependsOn) || j.RunIfDependencyFails != want.RunIfDependencyFails {
			t.Fatalf("job %+v from line %q (decoded %+v)", j, line, want)
		}
		if want.UniqueFor == "" && want.UniqueForMS == 0 && j.UniqueFor != 0 {
			t.Fatalf("unique_for %v for a line without one", j.UniqueFor)
		}
	})
}

// jsonlReference is what a --jsonl line says, read without parseJSONL (and
// without the strictness of broker.Job's JSON form): the fuzz test's
// reference.
type jsonlReference struct {
	Queue                string          `json:"queue"`
	Kind                 string          `json:"kind"`
	Payload              json.RawMessage `json:"payload"`
	ID                   string          `json:"id"`
	Delay                string          `json:"delay"`
	DelayMS              int64           `json:"delay_ms"`
	At                   time.Time       `json:"at"`
	RunAtMS              int64           `json:"run_at_ms"`
	MaxAttempts          int             `json:"max_attempts"`
	Priority             int             `json:"priority"`
	UniqueKey            string          `json:"unique_key"`
	UniqueFor            string          `json:"unique_for"`
	UniqueForMS          int64           `json:"unique_for_ms"`
	DependsOn            []string        `json:"depends_on"`
	RunIfDependencyFails bool            `json:"run_if_dependency_fails"`
}
