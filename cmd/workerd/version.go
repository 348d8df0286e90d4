package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/fenceq/fenceq/internal/version"
)

// runVersion prints which fenceq this binary is: "fenceq v0.4.0" (or
// devel, for a build from a checkout) and the Go toolchain that built it.
func runVersion(_ context.Context, e *env, args []string) error {
	fs := newFlags(e, "version", "")
	if _, err := parse(fs, "", args, 0, 0); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "workerd (fenceq %s, %s %s/%s)\n", version.String(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return nil
}
