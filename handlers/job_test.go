package handlers_test

import (
	"maps"
	"testing"

	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
)

// A handler gets its own copy of the metadata: what it changes is seen by
// nobody else, and a job without metadata costs no map.
func TestNewJobMetadata(t *testing.T) {
	t.Parallel()
	claimed := map[string]string{"tenant": "acme"}
	job := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "id-1", Kind: "email", Metadata: claimed}})
	if !maps.Equal(job.Metadata, claimed) {
		t.Fatalf("Metadata = %v, want %v", job.Metadata, claimed)
	}
	job.Metadata["tenant"] = "changed"
	delete(job.Metadata, "missing")
	if claimed["tenant"] != "acme" {
		t.Fatalf("a handler's change reached the claim's map: %v", claimed)
	}
	if m := handlers.NewJob(handlers.JobSpec{Row: jobrow.Row{ID: "id-2", Kind: "email"}}).Metadata; m != nil {
		t.Fatalf("Metadata of a job without any = %v, want nil", m)
	}
}
