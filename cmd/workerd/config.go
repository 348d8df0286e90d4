package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/worker"
)

// fileConfig is workerd.yaml. The README's configuration reference
// documents every field; keep the two in step.
type fileConfig struct {
	Redis           string                   `yaml:"redis"`
	Prefix          string                   `yaml:"prefix"`
	HTTP            string                   `yaml:"http"`
	UIToken         string                   `yaml:"ui_token"`
	ShutdownTimeout duration                 `yaml:"shutdown_timeout"`
	Pools           []poolConfig             `yaml:"pools"`
	Periodic        []periodicConfig         `yaml:"periodic"`
	Handlers        map[string]handlerConfig `yaml:"handlers"`
}

type poolConfig struct {
	Queues         []queueConfig    `yaml:"queues"`
	StrictPriority bool             `yaml:"strict_priority"`
	Concurrency    int              `yaml:"concurrency"`
	Lease          duration         `yaml:"lease"`
	PollInterval   duration         `yaml:"poll_interval"`
	Backoff        backoffConfig    `yaml:"backoff"`
	Retention      *retentionConfig `yaml:"retention"`
}

// retentionConfig is a pool's retention of finished jobs; omitted, the
// worker's defaults apply (done and cancelled a day, dead a week).
type retentionConfig struct {
	Done         duration `yaml:"done"`
	Cancelled    duration `yaml:"cancelled"`
	Dead         duration `yaml:"dead"`
	MaxDone      int      `yaml:"max_done"`
	MaxCancelled int      `yaml:"max_cancelled"`
	MaxDead      int      `yaml:"max_dead"`
}

// periodicConfig is a job enqueued on a schedule (worker.Periodic).
type periodicConfig struct {
	Name        string   `yaml:"name"`
	Cron        string   `yaml:"cron"`
	Every       duration `yaml:"every"`
	Queue       string   `yaml:"queue"`
	Kind        string   `yaml:"kind"`
	Payload     any      `yaml:"payload"`
	MaxAttempts int      `yaml:"max_attempts"`
	Priority    int      `yaml:"priority"`
	CatchUp     bool     `yaml:"catch_up"`
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
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration; write it with a unit, like 30s, 5m or 1h", n.Line, n.Value)
	}
	d.Duration = v
	return nil
}

// A queue may be written as its bare name.
func (q *queueConfig) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		q.Name = n.Value
		return nil
	}
	type plain queueConfig
	return n.Decode((*plain)(q))
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type main\.(\w+)`)

// loadConfig reads and checks a config file. Every error names the file,
// the line or field, and the fix.
func loadConfig(path string) (*fileConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, &configError{fmt.Errorf("read config: %w; pass the file with --config", err)}
	}
	defer f.Close()
	dec := yaml.NewDecoder(f)
	dec.KnownFields(true)
	var c fileConfig
	if err := dec.Decode(&c); err != nil {
		msg := err.Error()
		msg = strings.TrimPrefix(msg, "yaml: unmarshal errors:\n  ")
		msg = unknownField.ReplaceAllString(msg, `unknown field "$1" in $2 (check the spelling against the README's configuration reference)`)
		msg = strings.NewReplacer("poolConfig", "a pool", "fileConfig", "the top level", "handlerConfig", "a handler",
			"execConfig", "exec", "httpConfig", "http", "queueConfig", "a queue", "backoffConfig", "backoff",
			"retentionConfig", "retention", "periodicConfig", "a periodic job").Replace(msg)
		return nil, &configError{fmt.Errorf("%s: %s", path, msg)}
	}
	if err := c.validate(); err != nil {
		return nil, &configError{fmt.Errorf("%s: %w", path, err)}
	}
	return &c, nil
}

func (c *fileConfig) validate() error {
	if len(c.Pools) == 0 {
		return errors.New("pools: none configured; add at least one pool with its queues, e.g.\n  pools:\n    - queues: [default]\n      concurrency: 10")
	}
	for i, p := range c.Pools {
		if len(p.Queues) == 0 {
			return fmt.Errorf("pools[%d].queues: empty; name the queues this pool serves", i)
		}
		for j, q := range p.Queues {
			if q.Name == "" {
				return fmt.Errorf("pools[%d].queues[%d].name: missing", i, j)
			}
		}
		if r := p.Retention; r != nil && (r.MaxDone < 0 || r.MaxCancelled < 0 || r.MaxDead < 0) {
			return fmt.Errorf("pools[%d].retention: counts must not be negative (0 or omitted means no limit)", i)
		}
		if p.Concurrency < 0 {
			return fmt.Errorf("pools[%d].concurrency: %d; it must be positive (omit it for %d)", i, p.Concurrency, worker.ConcurrencyDefault)
		}
	}
	for i, p := range c.Periodic {
		if _, err := c.periodic(i, p); err != nil {
			return err
		}
	}
	if len(c.Handlers) == 0 {
		return errors.New("handlers: none configured; map each job kind to an exec or http handler")
	}
	for kind, h := range c.Handlers {
		switch {
		case kind == "":
			return errors.New(`handlers: a handler has an empty kind; key each handler by the job kind it runs`)
		case h.Exec == nil && h.HTTP == nil:
			return fmt.Errorf("handlers.%s: give it an exec or an http handler", kind)
		case h.Exec != nil && h.HTTP != nil:
			return fmt.Errorf("handlers.%s: give it exec or http, not both", kind)
		case h.Exec != nil && len(h.Exec.Command) == 0:
			return fmt.Errorf("handlers.%s.exec.command: missing; give the program and its arguments as a list, e.g. [./send-email, --verbose]", kind)
		case h.HTTP != nil && h.HTTP.URL == "":
			return fmt.Errorf("handlers.%s.http.url: missing", kind)
		}
	}
	return nil
}

// mux builds the handlers, and the per-kind timeouts for middleware.Timeout.
func (c *fileConfig) mux() (*handlers.Mux, map[string]time.Duration, error) {
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
			h, err = handlers.Exec(handlers.ExecConfig{
				Command: hc.Exec.Command, Dir: hc.Exec.Dir, Env: env,
				PermanentExitCodes: hc.Exec.PermanentExitCodes, KillGrace: hc.Exec.KillGrace.Duration,
			})
			if err != nil {
				return nil, nil, &configError{fmt.Errorf("handlers.%s.exec: %w", kind, err)}
			}
		} else {
			hdr := map[string][]string{}
			for k, v := range hc.HTTP.Headers {
				hdr[k] = []string{v}
			}
			h, err = handlers.HTTP(handlers.HTTPConfig{URL: hc.HTTP.URL, Header: hdr, Timeout: hc.HTTP.Timeout.Duration})
			if err != nil {
				return nil, nil, &configError{fmt.Errorf("handlers.%s.http: %w", kind, err)}
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
// schedule itself when the pool is built.
func (c *fileConfig) periodic(i int, p periodicConfig) (worker.Periodic, error) {
	if p.Name == "" || p.Queue == "" || p.Kind == "" {
		return worker.Periodic{}, fmt.Errorf("periodic[%d]: name, queue and kind are required", i)
	}
	payload := []byte("{}")
	if p.Payload != nil {
		b, err := json.Marshal(p.Payload)
		if err != nil {
			return worker.Periodic{}, fmt.Errorf("periodic[%d].payload: %v; write it as a YAML map, list or scalar", i, err)
		}
		payload = b
	}
	return worker.Periodic{Name: p.Name, Cron: p.Cron, Every: p.Every.Duration, CatchUp: p.CatchUp,
		Job: broker.Job{Queue: p.Queue, Kind: p.Kind, Payload: payload, MaxAttempts: p.MaxAttempts, Priority: p.Priority}}, nil
}
