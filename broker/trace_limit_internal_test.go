package broker

import (
	"context"
	"strings"
	"testing"
)

// Turning tracing on must not change which jobs Enqueue accepts:
// ValidateJob (what outbox.Enqueue and a periodic template are checked
// with) accepts metadata at MaxMetadataBytes, and so does an untraced
// Enqueue; the producer span's traceparent, added after the caller's
// metadata was sized, must not push the same job over the limit. (The
// outbox shows the harm: a row written without a span in ctx passes
// ValidateJob in the transaction, then the relay's traced EnqueueMany
// refuses it into the refused table.)
func TestTraceEnqueueKeepsMetadataAtTheLimit(t *testing.T) {
	b, _, _ := tracedBroker(t)
	j := Job{Queue: "q", Kind: "k", ID: "at-limit",
		Metadata: map[string]string{"k": strings.Repeat("v", MaxMetadataBytes-1)}}
	if err := b.Client().ValidateJob(j); err != nil {
		t.Fatalf("ValidateJob: %v", err)
	}
	if _, err := b.Client().Enqueue(context.Background(), j); err != nil {
		t.Fatalf("traced Enqueue of a job ValidateJob accepts (metadata at MaxMetadataBytes): %v", err)
	}
	j.ID = "at-limit-many"
	if got := b.Client().EnqueueMany(context.Background(), []Job{j})[0]; got.Err != nil {
		t.Fatalf("traced EnqueueMany of a job ValidateJob accepts (metadata at MaxMetadataBytes): %v", got.Err)
	}
}

// The trace context's entries are bounded apart from MaxMetadataBytes, by
// their own sizes: a traceparent of version 00, a tracestate of 512 bytes.
func TestMetadataBoundsTraceContextApart(t *testing.T) {
	tp := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	full := map[string]string{"k": strings.Repeat("v", MaxMetadataBytes-1), "traceparent": tp,
		"tracestate": strings.Repeat("a", tracestateMaxBytes)}
	if err := validMetadata(full); err != nil {
		t.Fatalf("metadata at the limit with a full trace context: %v", err)
	}
	for name, md := range map[string]map[string]string{
		"over the limit":     {"k": strings.Repeat("v", MaxMetadataBytes)},
		"a long traceparent": {"traceparent": tp + "-00"},
		"a long tracestate":  {"tracestate": strings.Repeat("a", tracestateMaxBytes+1)},
	} {
		if err := validMetadata(md); err == nil {
			t.Errorf("metadata with %s: accepted, want a ValidationError", name)
		}
	}
}

// A tracestate too long to carry loses list members from the right.
func TestFitTracestate(t *testing.T) {
	member := "v" + strings.Repeat("x", 98) // 99 bytes
	six := strings.Repeat(member+",", 5) + member
	if got, want := fitTracestate(six), strings.Repeat(member+",", 4)+member; got != want {
		t.Fatalf("fitTracestate of six 99-byte members (599 bytes) kept %d bytes, want the first five (%d)", len(got), len(want))
	}
	if got := fitTracestate(strings.Repeat("x", tracestateMaxBytes+1)); got != "" {
		t.Fatalf("fitTracestate of one member over the bound = %q, want none", got)
	}
	if got := fitTracestate("a=1,b=2"); got != "a=1,b=2" {
		t.Fatalf("fitTracestate of a short tracestate = %q, want it unchanged", got)
	}
}
