// Package version says which fenceq is running: the version the Go
// toolchain recorded for the fenceq module in the binary (a tagged release
// when fenceq is a dependency, or `go install …@v1.2.3`), else Dev.
package version

import (
	"runtime/debug"
	"sync"
)

// Module is fenceq's module path.
const Module = "github.com/fenceq/fenceq"

// Dev is the version of a build the toolchain recorded no version for: a
// checkout built with `go build` or `go run`.
const Dev = "devel"

var (
	once   sync.Once
	cached string
)

// String is the running fenceq's version, such as "v0.4.0", or Dev.
func String() string {
	once.Do(func() {
		info, ok := debug.ReadBuildInfo()
		if !ok {
			cached = Dev
			return
		}
		cached = fromBuildInfo(info)
	})
	return cached
}

func fromBuildInfo(info *debug.BuildInfo) string {
	if info.Main.Path == Module {
		return orDev(info.Main.Version)
	}
	for _, d := range info.Deps {
		if d.Path != Module {
			continue
		}
		if d.Replace != nil {
			return orDev(d.Replace.Version)
		}
		return orDev(d.Version)
	}
	return Dev
}

// orDev maps the toolchain's "(devel)" and an empty version to Dev.
func orDev(v string) string {
	if v == "" || v == "(devel)" {
		return Dev
	}
	return v
}
