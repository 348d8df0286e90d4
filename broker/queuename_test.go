package broker_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

// One rule for a queue's name, the one workerd.yaml applies: Enqueue
// refuses what ValidateQueue refuses, each refusal naming the rule.
func TestQueueNameRule(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	b, err := broker.New(rdb, broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ok := range []string{"mail", "reports.daily", "ünïcode", "a-b_c:d/e"} {
		if err := broker.ValidateQueue(ok); err != nil {
			t.Errorf("ValidateQueue(%q): %v", ok, err)
		}
	}
	for name, why := range map[string]string{
		"":                       "must not be empty",
		"a b":                    "must not contain white space",
		"a\u00a0b":               "must not contain white space",
		"mail ":                  "must not contain white space",
		"a\tb":                   "must not contain control characters",
		"a\u0085b":               "must not contain white space", // NEL: a C1 control and a space
		"a\u0080b":               "must not contain control characters",
		"a\x01b":                 "must not contain control characters",
		"{mail}":                 "must not contain '{' or '}'",
		strings.Repeat("q", 201): "is 201 bytes; at most 200 are allowed",
		"\xff":                   "is not valid UTF-8",
	} {
		err := broker.ValidateQueue(name)
		var ve *broker.ValidationError
		if !errors.As(err, &ve) || ve.Field != "queue" || !strings.Contains(err.Error(), why) || !strings.HasSuffix(err.Error(), broker.QueueNameRule) {
			t.Errorf("ValidateQueue(%q) = %v; want a ValidationError saying %q and ending with the rule", name, err, why)
			continue
		}
		if _, err := b.Client().Enqueue(ctx, broker.Job{Queue: name, Kind: "k"}); !errors.Is(err, broker.ErrInvalid) || !strings.Contains(err.Error(), why) {
			t.Errorf("Enqueue into %q: %v; want it refused: %s", name, err, why)
		}
	}
	if qs, err := b.Inspector().Queues(ctx); err != nil || len(qs) != 0 {
		t.Errorf("queues after the refusals: %v (%v); want none", qs, err)
	}
	// A queue named before the rule (here, by hand) can still be read.
	if err := rdb.SAdd(ctx, broker.PrefixDefault+":queues", "old name").Err(); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Inspector().Overview(ctx, "old name"); err != nil {
		t.Errorf("Overview of a queue named before the rule: %v", err)
	}
}
