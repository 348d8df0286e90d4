package main

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeConfig writes a workerd.yaml into a fresh directory and answers its
// path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "workerd.yaml")
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// Every bad file gets one message that names the file, the line and the
// field where there is one, what is wrong and what to write instead, and
// none of the parser's own words (EOF, Go type names, "unmarshal").
func TestConfigErrorMessages(t *testing.T) {
	t.Parallel()
	const handler = "handlers:\n  k: {exec: {command: [\"true\"]}}\n"
	const pool = "pools:\n  - queues: [a]\n"
	for _, tc := range []struct {
		name, yaml string
		want       []string
	}{
		{"Empty", "", []string{"the file is empty", "pools:", "handlers:"}},
		{"OnlyComments", "# nothing yet\n", []string{"the file is empty"}},
		{"BadIndentation", "pools:\n  - queues: [a]\n   concurrency: 3\n" + handler,
			[]string{"line 3:", `"concurrency: 3"`, "indentation"}},
		{"Tab", pool + "handlers:\n\tk: {exec: {command: [\"true\"]}}\n", []string{"line 4:", "tabs", "spaces"}},
		{"UnclosedBrace", pool + "handlers:\n  k: {exec: {command: [\"true\"]}\n", []string{"line 4:", "not closed"}},
		{"TopLevelList", "- a\n- b\n", []string{"line 1:", "must be a map of fields", "not a list"}},
		{"CommandNotAList", pool + "handlers:\n  k: {exec: {command: true}}\n",
			[]string{"line 4:", "handlers.k.exec.command:", `"true" is a boolean`, "write a list of text items, like [./send-email"}},
		{"ConcurrencyNotANumber", "pools:\n  - queues: [a]\n    concurrency: lots\n" + handler,
			[]string{"line 3:", "pools[0].concurrency:", `"lots" is text`, "a whole number"}},
		{"ExecNotAMap", pool + "handlers:\n  k:\n    exec: yes\n",
			[]string{"line 5:", "handlers.k.exec:", "a map with the fields of exec (command, dir"}},
		{"NegativeDuration", "pools:\n  - queues: [a]\n    lease: -5s\n" + handler,
			[]string{"line 3:", "pools[0].lease:", `"-5s" is negative`, "30s"}},
		{"NegativeBareNumber", "shutdown_timeout: -5\n" + pool + handler, []string{"line 1:", "shutdown_timeout:", "negative"}},
		{"DurationWithoutUnit", "pools:\n  - queues: [a]\n    lease: 30\n" + handler,
			[]string{"line 3:", "pools[0].lease:", `"30" is not a duration: it has no unit`, "30s"}},
		{"DurationNonsense", pool + "handlers:\n  k: {exec: {command: [\"true\"], kill_grace: soon}}\n",
			[]string{"line 4:", "handlers.k.exec.kill_grace:", `"soon" is not a duration`}},
		{"UnknownField", "pools:\n  - queues: [a]\n    concurency: 3\n" + handler,
			[]string{"line 3:", "pools[0]:", `unknown field "concurency" in a pool; did you mean "concurrency"?`}},
		{"UnknownTopLevelField", "colour: blue\n" + pool + handler,
			[]string{"line 1:", `unknown field "colour" in the top level, which has: redis, prefix, http`}},
		{"UnknownQueueField", "pools:\n  - queues: [{name: a, wieght: 2}]\n" + handler,
			[]string{"line 2:", "pools[0].queues[0]:", `unknown field "wieght" in a queue; did you mean "weight"?`}},
		{"ExitCodeZero", pool + "handlers:\n  k:\n    exec:\n      command: [\"true\"]\n      permanent_exit_codes: [0, 3]\n",
			[]string{"line 7:", "handlers.k.exec.permanent_exit_codes[0]:", "0 is success", "from 1 to 255"}},
		{"ExitCodeTooLarge", pool + "handlers:\n  k:\n    exec:\n      command: [\"true\"]\n      permanent_exit_codes: [3, 300]\n",
			[]string{"line 7:", "handlers.k.exec.permanent_exit_codes[1]:", "300 is not an exit code", "from 1 to 255"}},
		{"PayloadNotJSON", pool + "periodic:\n  - name: n\n    every: 1m\n    queue: a\n    kind: k\n    payload: not json\n" + handler,
			[]string{"line 8:", "periodic[0].payload:", `"not json" is not JSON`, "payload: {to: ada}", `'{"to": "ada"}'`}},
		{"PayloadBrokenJSONText", pool + "periodic:\n  - {name: n, every: 1m, queue: a, kind: k, payload: '{\"to\": '}\n" + handler,
			[]string{"line 4:", "periodic[0].payload:", "is not JSON"}},
		{"QueueWithSpace", "pools:\n  - queues: [a b]\n" + handler,
			[]string{"line 2:", "pools[0].queues[0]:", `"a b" is not a valid queue name`, "without white space", "write [a, b]"}},
		{"QueueWithBrace", "pools:\n  - queues: [\"a{b}\"]\n" + handler,
			[]string{"line 2:", "pools[0].queues[0]:", "'{' or '}'"}},
		{"SchedulePollTooShort", pool + "schedule_poll: 10ms\n" + handler, []string{"schedule_poll:", "give at least 100ms"}},
		{"PeriodicNamedTwice", pool + "periodic:\n  - {name: n, every: 1m, queue: a, kind: k}\n  - {name: n, cron: '@hourly', queue: a, kind: k}\n" + handler,
			[]string{"periodic[1].name:", `"n" is the name of periodic[0] too`, "rename one"}},
		{"PeriodicQueueWithSpace", pool + "periodic:\n  - {name: n, every: 1m, queue: \"x y\", kind: k}\n" + handler,
			[]string{"line 4:", "periodic[0].queue:", `"x y" is not a valid queue name`}},
		{"NoPools", handler, []string{"pools: none configured"}},
		{"EmptyQueues", "pools:\n  - queues: []\n" + handler, []string{"line 2:", "pools[0].queues: empty", "queues: [default]"}},
		{"MissingCommand", pool + "handlers:\n  k: {exec: {dir: /tmp}}\n", []string{"line 4:", "handlers.k.exec.command: missing"}},
		{"WeirdKind", pool + "handlers:\n  \"send email\": {http: {}}\n", []string{"line 4:", `handlers["send email"].http.url: missing`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			path := writeConfig(t, tc.yaml)
			c, err := loadConfig(path)
			var ce *configError
			if c != nil || !errors.As(err, &ce) {
				t.Fatalf("loadConfig answered (%v, %v); want a *configError", c, err)
			}
			msg := err.Error()
			for _, w := range append(tc.want, path+":") {
				if !strings.Contains(msg, w) {
					t.Errorf("message does not contain %q:\n%s", w, msg)
				}
			}
			for _, leak := range []string{"EOF", "unmarshal", "main.", "!!", "[]string", "yaml:"} {
				if strings.Contains(strings.ReplaceAll(msg, path, "FILE"), leak) {
					t.Errorf("message leaks the parser's %q:\n%s", leak, msg)
				}
			}
		})
	}
}

// A handler whose command cannot run is reported, when the handlers are
// built, with the file, the line and the field too.
func TestConfigCommandNotFound(t *testing.T) {
	t.Parallel()
	path := writeConfig(t, "pools:\n  - queues: [a]\nhandlers:\n  k:\n    exec: {command: [no-such-program-xyz]}\n")
	c, err := loadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.mux(slog.New(slog.DiscardHandler))
	if err == nil || !strings.Contains(err.Error(), path+": line 5: handlers.k.exec: exec no-such-program-xyz: not found") {
		t.Fatalf("mux: %v", err)
	}
}

// A periodic payload is a YAML value converted to JSON, or JSON text in
// quotes taken as it is; map keys that are not strings become strings.
func TestConfigPeriodicPayloads(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ payload, want string }{
		{"", "{}"},
		{"payload: null", "{}"},
		{"payload: {to: ada, n: 2}", `{"n":2,"to":"ada"}`},
		{"payload: [1, two]", `[1,"two"]`},
		{"payload: 42", "42"},
		{`payload: '{"to": "ada"}'`, `{"to":"ada"}`},
		{`payload: '"just text"'`, `"just text"`},
		{"payload: {1: one, true: yes}", `{"1":"one","true":"yes"}`},
	} {
		path := writeConfig(t, "pools:\n  - queues: [a]\nperiodic:\n  - name: n\n    every: 1m\n    queue: a\n    kind: k\n    "+tc.payload+"\nhandlers:\n  k: {exec: {command: [\"true\"]}}\n")
		c, err := loadConfig(path)
		if err != nil {
			t.Errorf("%s: %v", tc.payload, err)
			continue
		}
		p, err := c.periodic(0, c.Periodic[0])
		if err != nil || string(p.Job.Payload) != tc.want {
			t.Errorf("%s: payload %s (%v), want %s", tc.payload, p.Job.Payload, err, tc.want)
		}
	}
}
