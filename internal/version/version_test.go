package version

import (
	"runtime/debug"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	cases := []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"the main module, built from a checkout", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "(devel)"}}, Dev},
		{"the main module, installed at a tag", debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v0.4.0"}}, "v0.4.0"},
		{"a dependency", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}, Deps: []*debug.Module{
			{Path: "github.com/redis/go-redis/v9", Version: "v9.23.0"}, {Path: Module, Version: "v0.4.1"}}}, "v0.4.1"},
		{"a replaced dependency", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}, Deps: []*debug.Module{
			{Path: Module, Version: "v0.4.1", Replace: &debug.Module{Path: "../fenceq"}}}}, Dev},
		{"not linked in", debug.BuildInfo{Main: debug.Module{Path: "example.com/app"}}, Dev},
	}
	for _, c := range cases {
		if got := fromBuildInfo(&c.info); got != c.want {
			t.Errorf("%s: got %q, want %q", c.name, got, c.want)
		}
	}
	if String() == "" {
		t.Fatal("String() is empty")
	}
}
