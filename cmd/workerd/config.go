package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/fenceq/fenceq/internal/yamlerr"
	"log/slog"
	"maps"
	"math"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode"

	"go.yaml.in/yaml/v3"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/handlers/exec"
	"github.com/fenceq/fenceq/handlers/webhook"
	"github.com/fenceq/fenceq/worker"
)

// fileConfig is workerd.yaml. The README's configuration reference
// documents every field; keep the two in step.
type fileConfig struct {
	Redis           string                   `yaml:"redis"`
	Prefix          string                   `yaml:"prefix"`
	HTTP            string                   `yaml:"http"`
	UIToken         string                   `yaml:"ui_token"`
	UIAllowedHosts  []string                 `yaml:"ui_allowed_hosts"`
	APIToken        string                   `yaml:"api_token"`
	TLSCert         string                   `yaml:"tls_cert"`
	TLSKey          string                   `yaml:"tls_key"`
	ShutdownTimeout duration                 `yaml:"shutdown_timeout"`
	Pools           []poolConfig             `yaml:"pools"`
	Periodic        []periodicConfig         `yaml:"periodic"`
	SchedulePoll    duration                 `yaml:"schedule_poll"`
	Handlers        map[string]handlerConfig `yaml:"handlers"`

	// For a dashboard behind a proxy that terminates TLS: its cookies
	// Secure, and the header holding the client's address for the
	// sign-in rate limit (dashboard.Config's SecureCookie, ClientAddrHeader).
	UISecureCookie     bool   `yaml:"ui_secure_cookie"`
	UIClientAddrHeader string `yaml:"ui_client_addr_header"`

	file  string        // the file it was loaded from
	index yamlerr.Index // where each field is in it
}

type poolConfig struct {
	Queues         []queueConfig     `yaml:"queues"`
	StrictPriority bool              `yaml:"strict_priority"`
	Concurrency    int               `yaml:"concurrency"`
	Lease          duration          `yaml:"lease"`
	PollInterval   duration          `yaml:"poll_interval"`
	Backoff        backoffConfig     `yaml:"backoff"`
	Retention      *retentionConfig  `yaml:"retention"`
	UnknownKind    unknownKindConfig `yaml:"unknown_kind"`
	// Name labels the pool in the worker registry; default "pool N".
	Name string `yaml:"name"`
	// RegistryInterval is how often the pool refreshes its registry
	// entry (worker.Config.RegistryInterval); "off" keeps it out.
	RegistryInterval registryInterval `yaml:"registry_interval"`
}

// registryInterval is a pool's registry refresh interval: a duration, or
// "off".
type registryInterval struct{ duration }

func (r *registryInterval) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == "off" {
		r.Duration = worker.NoRegistry
		return nil
	}
	return r.duration.UnmarshalYAML(n)
}

// unknownKindConfig is how a pool gives back a job of a kind missing from
// handlers (worker.UnknownKindPolicy); each omitted field takes the
// worker's default (5s, 5m, 24h), and dead_after "forever" waits for ever.
type unknownKindConfig struct {
	Delay     duration  `yaml:"delay"`
	MaxDelay  duration  `yaml:"max_delay"`
	DeadAfter retainAge `yaml:"dead_after"`
}

// retentionConfig is a pool's retention of finished jobs; each omitted
// field takes the worker's default (done and cancelled a day, dead a week;
// at most 10,000 of each), and "forever"
// (an age) or -1 (a count) lifts that limit.
type retentionConfig struct {
	Done         retainAge `yaml:"done"`
	Cancelled    retainAge `yaml:"cancelled"`
	Dead         retainAge `yaml:"dead"`
	MaxDone      int       `yaml:"max_done"`
	MaxCancelled int       `yaml:"max_cancelled"`
	MaxDead      int       `yaml:"max_dead"`
}

// periodicConfig is a job enqueued on a schedule (worker.Periodic): the
// schedule's fields, and beside them the job's, which are broker.Job's JSON
// form written in YAML (queue, kind, payload, max_attempts, priority,
// delay, unique_key, unique_for, depends_on, …), so a field the job gains
// is a field here too.
type periodicConfig struct {
	Name    string   `yaml:"name"`
	Cron    string   `yaml:"cron"`
	Every   duration `yaml:"every"`
	CatchUp bool     `yaml:"catch_up"`
	// Job holds every other field, read by periodic.
	Job map[string]yaml.Node `yaml:",inline"`
}

type queueConfig struct {
	Name   string `yaml:"name"`
	Weight int    `yaml:"weight"`
}

type backoffConfig struct {
	Base duration `yaml:"base"`
	Max  duration `yaml:"max"`
}

type handlerConfig struct {
	Exec    *execConfig `yaml:"exec"`
	HTTP    *httpConfig `yaml:"http"`
	Timeout duration    `yaml:"timeout"`
}

type execConfig struct {
	Command            []string          `yaml:"command"`
	Dir                string            `yaml:"dir"`
	Env                map[string]string `yaml:"env"`
	PermanentExitCodes []int             `yaml:"permanent_exit_codes"`
	KillGrace          duration          `yaml:"kill_grace"`
}

type httpConfig struct {
	URL     string            `yaml:"url"`
	Headers map[string]string `yaml:"headers"`
	Timeout duration          `yaml:"timeout"`
}

// duration is a time.Duration written with a unit ("30s", "5m").
type duration struct{ time.Duration }

func (d *duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	number := n.Value != "" && strings.Trim(n.Value, "+-0123456789.") == ""
	switch {
	case n.Kind != yaml.ScalarNode:
		return yamlerr.Nodef(n, "a duration is one value with a unit, like 30s, 5m or 1h")
	case v < 0 || number && strings.HasPrefix(n.Value, "-"):
		return yamlerr.Nodef(n, "%q is negative; a duration here is 0 or more, like 30s", n.Value)
	case err != nil && number:
		return yamlerr.Nodef(n, "%q is not a duration: it has no unit; write it with one, like %ss, %sm or %sh", n.Value, n.Value, n.Value, n.Value)
	case err != nil:
		return yamlerr.Nodef(n, "%q is not a duration; write it with a unit, like 30s, 5m or 1h", n.Value)
	}
	d.Duration = v
	return nil
}

// retainAge is a retention age: a duration, or "forever".
type retainAge struct{ duration }

func (a *retainAge) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode && n.Value == "forever" {
		a.Duration = worker.KeepForever
		return nil
	}
	return a.duration.UnmarshalYAML(n)
}

// A queue may be written as its bare name.
func (q *queueConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		q.Name = n.Value
		return nil
	}
	// Node.Decode does not refuse unknown fields as the file's decoder
	// does, so check them here.
	if n.Kind == yaml.MappingNode {
		for i := 0; i < len(n.Content); i += 2 {
			if k := n.Content[i]; k.Value != "name" && k.Value != "weight" {
				return yamlerr.Nodef(n, "%s", configSchema.UnknownField(k.Value, "queueConfig"))
			}
		}
	}
	type plain queueConfig
	return n.Decode((*plain)(q))
}

// loadConfig reads and checks a config file. Every error names the file,
// the line and the field where it can, and the fix.
func loadConfig(path string) (*fileConfig, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, &configError{fmt.Errorf("read config: %w; pass the file with --config", err)}
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, syntaxError(path, data, err)
	}
	if len(doc.Content) == 0 || doc.Content[0].ShortTag() == "!!null" {
		return nil, &configError{fmt.Errorf("%s: the file is empty; a config needs at least pools and handlers, e.g.\n%s", path, minimalConfig)}
	}
	if top := doc.Content[0]; top.Kind != yaml.MappingNode {
		return nil, &configError{fmt.Errorf("%s: line %d: the file must be a map of fields (redis, pools, handlers, ...), not %s; e.g.\n%s",
			path, top.Line, yamlerr.Kinds[strings.TrimPrefix(top.ShortTag(), "!!")], minimalConfig)}
	}
	idx := yamlerr.NewIndex(&doc)
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var c fileConfig
	if err := dec.Decode(&c); err != nil {
		return nil, fileError(path, idx, err)
	}
	if err := c.validate(); err != nil {
		return nil, fileError(path, idx, err)
	}
	c.file, c.index = path, idx
	return &c, nil
}

const minimalConfig = `  pools:
    - queues: [default]
  handlers:
    send_email:
      exec: {command: [./send-email]}`

// errorf is an error at a field of the loaded file, for what is found
// after loading (a handler's command that cannot run).
func (c *fileConfig) errorf(path, format string, args ...any) error {
	return fileError(c.file, c.index, yamlerr.Fieldf(path, format, args...))
}

func (c *fileConfig) validate() error {
	if len(c.Pools) == 0 {
		return yamlerr.Fieldf("pools", "none configured; add at least one pool with its queues, e.g.\n  pools:\n    - queues: [default]\n      concurrency: 10")
	}
	for i, p := range c.Pools {
		if len(p.Queues) == 0 {
			return yamlerr.Fieldf(fmt.Sprintf("pools[%d].queues", i), "empty; name the queues this pool serves, like queues: [default]")
		}
		for j, q := range p.Queues {
			if err := checkQueueName(fmt.Sprintf("pools[%d].queues[%d]", i, j), q.Name); err != nil {
				return err
			}
		}
		if r := p.Retention; r != nil && (r.MaxDone < -1 || r.MaxCancelled < -1 || r.MaxDead < -1) {
			return yamlerr.Fieldf(fmt.Sprintf("pools[%d].retention", i), "counts must be positive, or -1 for no limit (omitted means the default)")
		}
		if p.Concurrency < 0 {
			return yamlerr.Fieldf(fmt.Sprintf("pools[%d].concurrency", i), "%d; it must be positive (omit it for %d)", p.Concurrency, worker.ConcurrencyDefault)
		}
	}
	if d := c.SchedulePoll.Duration; d != 0 && d < 100*time.Millisecond {
		return yamlerr.Fieldf("schedule_poll", "%v; give at least 100ms, like 5s (omit it for %v)", d, worker.SchedulePollDefault)
	}
	names := map[string]int{}
	for i, p := range c.Periodic {
		if _, err := c.periodic(i, p); err != nil {
			return err
		}
		if j, ok := names[p.Name]; ok {
			return yamlerr.Fieldf(fmt.Sprintf("periodic[%d].name", i), "%q is the name of periodic[%d] too; a name identifies one schedule (it is part of each tick's job id): rename one", p.Name, j)
		}
		names[p.Name] = i
	}
	if len(c.Handlers) == 0 {
		return yamlerr.Fieldf("handlers", "none configured; map each job kind to an exec or http handler, e.g.\n  handlers:\n    send_email:\n      exec: {command: [./send-email]}")
	}
	for _, kind := range slices.Sorted(maps.Keys(c.Handlers)) {
		h, at := c.Handlers[kind], yamlerr.JoinPath("handlers", kind)
		switch {
		case kind == "":
			return yamlerr.Fieldf(at, "a handler has an empty kind; key each handler by the job kind it runs")
		case h.Exec == nil && h.HTTP == nil:
			return yamlerr.Fieldf(at, "give it an exec or an http handler")
		case h.Exec != nil && h.HTTP != nil:
			return yamlerr.Fieldf(at, "give it exec or http, not both")
		case h.Exec != nil && len(h.Exec.Command) == 0:
			return yamlerr.Fieldf(at+".exec.command", "missing; give the program and its arguments as a list, e.g. [./send-email, --verbose]")
		case h.HTTP != nil && h.HTTP.URL == "":
			return yamlerr.Fieldf(at+".http.url", "missing; give the URL the payload is POSTed to, e.g. http://127.0.0.1:8080/jobs")
		}
		if err := checkKind(at, kind); err != nil {
			return err
		}
		if h.Exec != nil {
			for i, code := range h.Exec.PermanentExitCodes {
				at := fmt.Sprintf("%s.exec.permanent_exit_codes[%d]", at, i)
				switch {
				case code == 0:
					return yamlerr.Fieldf(at, "0 is success, not a failure; list exit codes from 1 to 255 that mean \"do not retry\"")
				case code < 0 || code > 255:
					return yamlerr.Fieldf(at, "%d is not an exit code: a program exits with 0 to 255; list codes from 1 to 255", code)
				}
			}
		}
	}
	return nil
}

// checkQueueName refuses what broker.ValidateQueue refuses in a queue
// name (the rule the broker and workerd's commands apply too), and for a
// name with white space, almost always a list mistyped, shows the list.
func checkQueueName(at, name string) error {
	switch {
	case name == "":
		return yamlerr.Fieldf(at, "a queue needs a name; %s", broker.QueueNameRule)
	case broker.ValidateQueue(name) == nil:
		return nil
	case strings.ContainsFunc(name, unicode.IsSpace) && !strings.ContainsFunc(name, unicode.IsControl):
		return yamlerr.Fieldf(at, "%q is not a valid queue name: %s; for two queues write [%s]",
			name, broker.QueueNameRule, strings.Join(strings.Fields(name), ", "))
	}
	return yamlerr.Fieldf(at, "%q is not a valid queue name: %s", name, broker.QueueNameRule)
}

// checkKind refuses what broker.ValidateKind refuses in a job kind, and
// also the C1 control characters, which the broker accepts.
func checkKind(at, kind string) error {
	if broker.ValidateKind(kind) != nil || strings.ContainsFunc(kind, unicode.IsControl) {
		return yamlerr.Fieldf(at, "%q is not a valid job kind: a kind is up to 200 bytes of UTF-8 without control characters, like send_email", kind)
	}
	return nil
}

// mux builds the handlers, and the per-kind timeouts for middleware.Timeout.
// Exec handlers log what their commands write to standard error to log.
func (c *fileConfig) mux(log *slog.Logger) (*handlers.Mux, map[string]time.Duration, error) {
	m := handlers.NewMux()
	timeouts := map[string]time.Duration{}
	kinds := make([]string, 0, len(c.Handlers))
	for k := range c.Handlers {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, kind := range kinds {
		hc := c.Handlers[kind]
		var h handlers.Handler
		var err error
		if hc.Exec != nil {
			env := make([]string, 0, len(hc.Exec.Env))
			for k, v := range hc.Exec.Env {
				env = append(env, k+"="+v)
			}
			sort.Strings(env)
			h, err = exec.New(exec.Config{
				Command: hc.Exec.Command, Dir: hc.Exec.Dir, Env: env,
				PermanentExitCodes: hc.Exec.PermanentExitCodes, KillGrace: hc.Exec.KillGrace.Duration, Logger: log,
			})
			if err != nil {
				return nil, nil, c.errorf(yamlerr.JoinPath("handlers", kind)+".exec", "%v", err)
			}
		} else {
			hdr := map[string][]string{}
			for k, v := range hc.HTTP.Headers {
				hdr[k] = []string{v}
			}
			h, err = webhook.New(webhook.Config{URL: hc.HTTP.URL, Header: hdr, Timeout: hc.HTTP.Timeout.Duration})
			if err != nil {
				return nil, nil, c.errorf(yamlerr.JoinPath("handlers", kind)+".http", "%v", err)
			}
		}
		m.Handle(kind, h)
		if hc.Timeout.Duration > 0 {
			timeouts[kind] = hc.Timeout.Duration
		}
	}
	return m, timeouts, nil
}

// workerConfig is the pool configuration of one pools entry.
func (p poolConfig) workerConfig() worker.Config {
	cfg := worker.Config{
		StrictPriority: p.StrictPriority, Concurrency: p.Concurrency,
		LeaseDuration: p.Lease.Duration, PollInterval: p.PollInterval.Duration,
		UnknownKind: worker.UnknownKindPolicy{Delay: p.UnknownKind.Delay.Duration, MaxDelay: p.UnknownKind.MaxDelay.Duration,
			For: p.UnknownKind.DeadAfter.Duration},
		Name: p.Name, RegistryInterval: p.RegistryInterval.Duration,
	}
	for _, q := range p.Queues {
		cfg.Queues = append(cfg.Queues, worker.Queue{Name: q.Name, Weight: q.Weight})
	}
	if r := p.Retention; r != nil {
		cfg.Retention = &broker.Retention{Done: r.Done.Duration, Cancelled: r.Cancelled.Duration, Dead: r.Dead.Duration,
			MaxDone: r.MaxDone, MaxCancelled: r.MaxCancelled, MaxDead: r.MaxDead}
	}
	if p.Backoff.Base.Duration > 0 || p.Backoff.Max.Duration > 0 {
		base, limit := p.Backoff.Base.Duration, p.Backoff.Max.Duration
		if base == 0 {
			base = time.Second
		}
		if limit == 0 {
			limit = time.Hour
		}
		cfg.Backoff = worker.ExponentialBackoff(base, limit)
	}
	return cfg
}

// periodic turns entry i into a worker.Periodic; the worker checks the
// schedule and the job itself when the pool is built.
func (c *fileConfig) periodic(i int, p periodicConfig) (worker.Periodic, error) {
	at := fmt.Sprintf("periodic[%d]", i)
	job, err := periodicJob(at, p.Job)
	if err != nil {
		return worker.Periodic{}, err
	}
	if p.Name == "" || job.Queue == "" || job.Kind == "" {
		return worker.Periodic{}, yamlerr.Fieldf(at, "name, queue and kind are required")
	}
	if err := checkQueueName(at+".queue", job.Queue); err != nil {
		return worker.Periodic{}, err
	}
	if err := checkKind(at+".kind", job.Kind); err != nil {
		return worker.Periodic{}, err
	}
	return worker.Periodic{Name: p.Name, Cron: p.Cron, Every: p.Every.Duration, CatchUp: p.CatchUp, Job: job}, nil
}

// periodicJob reads the job fields of a periodic entry at path at: each
// converted to JSON (the payload as payloadJSON says), then read together
// by broker.Job's UnmarshalJSON, the reader of every job written outside
// Go. The id is refused: each tick sets its own.
func periodicJob(at string, fields map[string]yaml.Node) (broker.Job, error) {
	obj := make(map[string]json.RawMessage, len(fields))
	for _, k := range slices.Sorted(maps.Keys(fields)) {
		n := fields[k]
		known := func(f string) bool { return strings.EqualFold(f, k) }
		switch {
		case strings.EqualFold(k, "id"):
			return broker.Job{}, &yamlerr.FieldError{Path: at, Line: n.Line, Msg: "a periodic job has no id: each tick's job gets its own (periodic:NAME:TIME); remove it"}
		case !slices.ContainsFunc(broker.JobFields(), known):
			fields := slices.DeleteFunc(append(yamlerr.Fields(reflect.TypeFor[periodicConfig]()), broker.JobFields()...), func(f string) bool { return f == "id" })
			return broker.Job{}, &yamlerr.FieldError{Path: at, Line: n.Line, Msg: yamlerr.UnknownFieldIn(k, "a periodic job", fields)}
		}
		var v []byte
		var err error
		if strings.EqualFold(k, "payload") {
			v, err = payloadJSON(&n)
		} else {
			v, err = yamlJSON(&n)
		}
		if err != nil {
			return broker.Job{}, &yamlerr.FieldError{Path: yamlerr.JoinPath(at, k), Line: n.Line, Msg: err.Error()}
		}
		obj[k] = v
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return broker.Job{}, yamlerr.Fieldf(at, "cannot be read as a job: %v", err)
	}
	var j broker.Job
	if err := json.Unmarshal(data, &j); err != nil {
		var ve *broker.ValidationError
		if !errors.As(err, &ve) {
			return broker.Job{}, yamlerr.Fieldf(at, "cannot be read as a job: %v", err)
		}
		msg := ve.Reason
		if ve.Value != "" {
			msg = fmt.Sprintf("%q %s", ve.Value, ve.Reason)
		}
		return broker.Job{}, yamlerr.Fieldf(yamlerr.JoinPath(at, ve.Field), "%s", msg)
	}
	if len(j.Payload) == 0 {
		j.Payload = []byte("{}")
	}
	return j, nil
}

// yamlJSON is a YAML value (a job field's) as JSON.
func yamlJSON(n *yaml.Node) ([]byte, error) {
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, fmt.Errorf("cannot be read: %v", err)
	}
	v, err := jsonValue(v)
	if err != nil {
		return nil, err
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cannot be written as JSON: %v", err)
	}
	return b, nil
}

// payloadJSON is a periodic job's payload as JSON: a YAML map, list, number
// or boolean converted, or a quoted string that holds JSON text, taken as
// it is. A bare word is refused rather than sent as a JSON string, since
// payload: '{"to": "ada"}' sent as a string would be the payload encoded
// twice.
func payloadJSON(n *yaml.Node) ([]byte, error) {
	const how = `write it as a YAML map or list (payload: {to: ada}), or as JSON text in quotes (payload: '{"to": "ada"}'; a JSON string is '"text"')`
	switch {
	case n.Kind == 0 || n.ShortTag() == "!!null":
		return []byte("{}"), nil
	case n.Kind == yaml.ScalarNode && n.ShortTag() == "!!str":
		if !json.Valid([]byte(n.Value)) {
			return nil, fmt.Errorf("%q is not JSON; %s", yamlerr.Short(n.Value), how)
		}
		var b bytes.Buffer
		_ = json.Compact(&b, []byte(n.Value))
		return b.Bytes(), nil
	}
	var v any
	if err := n.Decode(&v); err != nil {
		return nil, fmt.Errorf("cannot be read (%v); %s", err, how)
	}
	v, err := jsonValue(v)
	if err != nil {
		return nil, fmt.Errorf("%v; %s", err, how)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("cannot be written as JSON (%v); %s", err, how)
	}
	return b, nil
}

// jsonValue makes what yaml decoded encodable as JSON: map keys become
// strings, as JSON requires; a value JSON has no form for is an error.
func jsonValue(v any) (any, error) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			e, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			v[k] = e
		}
		return v, nil
	case map[any]any:
		m := make(map[string]any, len(v))
		for k, e := range v {
			switch k.(type) {
			case string, int, int64, uint64, float64, bool, nil:
			default:
				return nil, fmt.Errorf("a map key of type %T cannot be a JSON object key", k)
			}
			e, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			m[fmt.Sprint(k)] = e
		}
		return m, nil
	case []any:
		for i, e := range v {
			e, err := jsonValue(e)
			if err != nil {
				return nil, err
			}
			v[i] = e
		}
		return v, nil
	case float64:
		if math.IsInf(v, 0) || math.IsNaN(v) {
			return nil, fmt.Errorf("%v is not a JSON number", v)
		}
	}
	return v, nil
}
