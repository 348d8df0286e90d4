//go:build unix

package exec_test

import (
	"context"
	"testing"

	"github.com/fenceq/fenceq/handlers/exec"
)

// BenchmarkExecTrue is the cost of running a command that does nothing:
// what the adapter adds to every job, starting and reaping included.
func BenchmarkExecTrue(b *testing.B) {
	h, err := exec.New(exec.Config{Command: []string{"true"}})
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := h.ProcessJob(context.Background(), newJob("k", nil)); err != nil {
			b.Fatal(err)
		}
	}
}
