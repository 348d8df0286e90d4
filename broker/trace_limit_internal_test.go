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
	if err := b.ValidateJob(j); err != nil {
		t.Fatalf("ValidateJob: %v", err)
	}
	if _, err := b.Enqueue(context.Background(), j); err != nil {
		t.Fatalf("traced Enqueue of a job ValidateJob accepts (metadata at MaxMetadataBytes): %v", err)
	}
	j.ID = "at-limit-many"
	if got := b.EnqueueMany(context.Background(), []Job{j})[0]; got.Err != nil {
		t.Fatalf("traced EnqueueMany of a job ValidateJob accepts (metadata at MaxMetadataBytes): %v", got.Err)
	}
}
