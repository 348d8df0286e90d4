package broker_test

import (
	"maps"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// A typed job's metadata is the type's default entries with the caller's
// laid over them key by key, in a map of the Job's own: a tracer adding its
// headers to the Job changes neither the options nor the type's default.
func TestJobForMetadata(t *testing.T) {
	defaults := map[string]string{"tenant": "acme", "region": "eu"}
	given := map[string]string{"tenant": "globex", "request_id": "r-1"}
	args := givenDefaults{defaults: broker.EnqueueOptions{Metadata: defaults}}
	j, err := broker.JobFor(args, &broker.EnqueueOptions{Metadata: given})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"tenant": "globex", "region": "eu", "request_id": "r-1"}
	if !maps.Equal(j.Metadata, want) {
		t.Fatalf("Job.Metadata = %v, want %v", j.Metadata, want)
	}
	for _, opts := range []*broker.EnqueueOptions{nil, {Metadata: given}} {
		for _, a := range []broker.Args{args, givenDefaults{}} {
			j, err := broker.JobFor(a, opts)
			if err != nil {
				t.Fatal(err)
			}
			if j.Metadata != nil { // nil: neither gave any
				j.Metadata["traceparent"] = "added to the job"
			}
		}
	}
	if len(defaults) != 2 || len(given) != 2 {
		t.Fatalf("adding to a Job's metadata reached the type's default (%v) or the options (%v)", defaults, given)
	}
	if j, _ := broker.JobFor(givenDefaults{}, nil); j.Metadata != nil {
		t.Fatalf("Job.Metadata without any given = %v, want nil", j.Metadata)
	}
}
