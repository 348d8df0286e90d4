package worker

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fenceq/fenceq/broker"
)

func TestConfigDefaults(t *testing.T) {
	c := Config{}.withDefaults()
	if len(c.Queues) != 1 || c.Queues[0] != (Queue{Name: QueueDefault, Weight: 1}) {
		t.Fatalf("queues = %+v", c.Queues)
	}
	if c.Concurrency != ConcurrencyDefault || c.LeaseDuration != LeaseDurationDefault ||
		c.PollInterval != PollIntervalDefault || c.ShutdownTimeout != ShutdownTimeoutDefault ||
		c.ReapBatch != ReapBatchDefault || c.Backoff == nil || c.Logger == nil ||
		c.Retention == nil || c.Retention.Done != RetainDoneDefault || c.Retention.Dead != RetainDeadDefault ||
		c.UnknownKind != (UnknownKindPolicy{UnknownKindDelayDefault, UnknownKindMaxDelayDefault, UnknownKindForDefault}) {
		t.Fatalf("defaults not applied: %+v", c)
	}
	if err := c.validate(); err != nil {
		t.Fatalf("the zero Config is not valid: %v", err)
	}
	if got := c.reapInterval(); got != 10*time.Second {
		t.Fatalf("reap interval = %v, want lease/3", got)
	}
}

// Retention bounds Redis memory by default: by count as well as by age,
// each field on its own, with KeepForever lifting one limit.
func TestConfigRetention(t *testing.T) {
	defaults := broker.Retention{
		Done: RetainDoneDefault, Cancelled: RetainCancelledDefault, Dead: RetainDeadDefault,
		MaxDone: RetainMaxDoneDefault, MaxCancelled: RetainMaxCancelledDefault, MaxDead: RetainMaxDeadDefault,
	}
	forever := broker.Retention{Done: KeepForever, Cancelled: KeepForever, Dead: KeepForever,
		MaxDone: KeepForever, MaxCancelled: KeepForever, MaxDead: KeepForever}
	cases := []struct {
		name       string
		given      *broker.Retention
		kept, trim broker.Retention
	}{
		{"Nil", nil, defaults, defaults},
		{"Zero", &broker.Retention{}, defaults, defaults},
		{"OneField", &broker.Retention{MaxDone: 50}, func() broker.Retention { r := defaults; r.MaxDone = 50; return r }(),
			func() broker.Retention { r := defaults; r.MaxDone = 50; return r }()},
		{"CountOnly", &broker.Retention{Done: KeepForever}, func() broker.Retention { r := defaults; r.Done = KeepForever; return r }(),
			func() broker.Retention { r := defaults; r.Done = 0; return r }()},
		{"KeepForever", &forever, forever, broker.Retention{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var before broker.Retention
			if tc.given != nil {
				before = *tc.given
			}
			c := Config{Retention: tc.given}.withDefaults()
			if err := c.validate(); err != nil {
				t.Fatalf("validate() = %v", err)
			}
			if *c.Retention != tc.kept {
				t.Fatalf("Retention = %+v, want %+v", *c.Retention, tc.kept)
			}
			if got := c.trimRetention(); got != tc.trim {
				t.Fatalf("trimRetention() = %+v, want %+v (0: no limit)", got, tc.trim)
			}
			if tc.given != nil && *tc.given != before {
				t.Fatalf("withDefaults wrote the caller's Retention: %+v", *tc.given)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		msg  string
	}{
		{"NegativeConcurrency", func(c *Config) { c.Concurrency = -1 }, "Concurrency"},
		{"ShortLease", func(c *Config) { c.LeaseDuration = time.Millisecond }, "LeaseDuration"},
		{"NegativePoll", func(c *Config) { c.PollInterval = -time.Second }, "PollInterval"},
		{"NegativeShutdown", func(c *Config) { c.ShutdownTimeout = -1 }, "ShutdownTimeout"},
		{"NegativeReapBatch", func(c *Config) { c.ReapBatch = -5 }, "ReapBatch"},
		{"NegativeWeight", func(c *Config) { c.Queues = []Queue{{Name: "a", Weight: -1}} }, "weight"},
		{"DuplicateQueue", func(c *Config) { c.Queues = []Queue{{Name: "a"}, {Name: "a"}} }, "twice"},
		{"NegativeRetentionAge", func(c *Config) { c.Retention = &broker.Retention{Dead: -time.Hour} }, "Retention.Dead"},
		{"NegativeRetentionCount", func(c *Config) { c.Retention = &broker.Retention{MaxDone: -2} }, "Retention.MaxDone"},
		{"BracedQueueName", func(c *Config) { c.Queues = []Queue{{Name: "a{b"}} }, "queue"},
		{"NegativeUnknownKindDelay", func(c *Config) { c.UnknownKind.Delay = -1 }, "UnknownKind.Delay"},
		{"UnknownKindMaxBelowDelay", func(c *Config) { c.UnknownKind = UnknownKindPolicy{Delay: time.Minute, MaxDelay: time.Second} }, "UnknownKind.MaxDelay"},
		{"NegativeUnknownKindFor", func(c *Config) { c.UnknownKind.For = -time.Hour }, "WaitForever"},
	}
	fields := map[string]string{
		"NegativeConcurrency": "Concurrency", "ShortLease": "LeaseDuration", "NegativePoll": "PollInterval",
		"NegativeShutdown": "ShutdownTimeout", "NegativeReapBatch": "ReapBatch", "NegativeWeight": "Queues",
		"DuplicateQueue": "Queues", "NegativeRetentionAge": "Retention.Dead", "NegativeRetentionCount": "Retention.MaxDone",
		"BracedQueueName": "Queues", "NegativeUnknownKindDelay": "UnknownKind.Delay",
		"UnknownKindMaxBelowDelay": "UnknownKind.MaxDelay", "NegativeUnknownKindFor": "UnknownKind.For",
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{}
			tc.mod(&c)
			err := c.withDefaults().validate()
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("validate() = %v, want an error naming %s", err, tc.msg)
			}
			var ce *ConfigError
			if !errors.As(err, &ce) || !errors.Is(err, ErrInvalidConfig) || !errors.Is(err, broker.ErrInvalid) {
				t.Fatalf("validate() = %T %v, want a *ConfigError wrapping ErrInvalidConfig and broker.ErrInvalid", err, err)
			}
			if want := fields[tc.name]; ce.Field != want {
				t.Fatalf("ConfigError.Field = %q, want %q", ce.Field, want)
			}
		})
	}
}

func TestExponentialBackoff(t *testing.T) {
	f := ExponentialBackoff(time.Second, time.Minute)
	for attempt, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 4: 8 * time.Second, 30: time.Minute} {
		for range 100 {
			d := f(attempt)
			if d < base*3/4 || d > base*5/4 {
				t.Fatalf("attempt %d: %v, want within 25%% of %v", attempt, d, base)
			}
		}
	}
	c := Config{KindBackoff: map[string]BackoffFunc{"fast": func(int) time.Duration { return -time.Second }}}.withDefaults()
	if d := c.backoff("fast", 3); d != 0 {
		t.Fatalf("per-kind backoff %v, want a negative value clamped to 0", d)
	}
}

func TestParseSchedule(t *testing.T) {
	at := time.Date(2026, 11, 30, 14, 37, 20, 0, time.UTC)
	cases := []struct {
		p          Periodic
		next, prev time.Time
	}{
		{Periodic{Name: "a", Every: time.Minute}, time.Date(2026, 11, 30, 14, 38, 0, 0, time.UTC), time.Date(2026, 11, 30, 14, 37, 0, 0, time.UTC)},
		{Periodic{Name: "b", Cron: "0 * * * *"}, time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 14, 0, 0, 0, time.UTC)},
		{Periodic{Name: "c", Cron: "@daily"}, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)},
		{Periodic{Name: "d", Cron: "0 0 1 1 *"}, time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
	}
	for _, tc := range cases {
		s, err := parseSchedule(tc.p)
		if err != nil {
			t.Fatalf("%s: %v", tc.p.Name, err)
		}
		if got := s.next(at); !got.Equal(tc.next) {
			t.Errorf("%s: next = %v, want %v", tc.p.Name, got, tc.next)
		}
		if got := s.prev(at); !got.Equal(tc.prev) {
			t.Errorf("%s: prev = %v, want %v", tc.p.Name, got, tc.prev)
		}
	}
	for _, bad := range []Periodic{
		{Every: time.Minute},
		{Name: "x"},
		{Name: "x", Every: time.Minute, Cron: "* * * * *"},
		{Name: "x", Cron: "61 * * * *"},
		{Name: "x", Every: time.Millisecond},
	} {
		if _, err := parseSchedule(bad); err == nil {
			t.Errorf("parseSchedule(%+v) accepted", bad)
		}
	}
	if got := tickID("r", time.Unix(1700000000, 0)); got != "periodic:r:1700000000" {
		t.Fatalf("tickID = %q", got)
	}
}
