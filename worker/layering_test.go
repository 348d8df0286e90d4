package worker

import (
	"go/build"
	"strings"
	"testing"
)

// The pool reaches Redis only through the broker package (see the package
// doc): none of its files imports a Redis client.
func TestWorkerImportsNoRedisClient(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.Contains(imp, "go-redis") || strings.Contains(imp, "redis/") {
			t.Errorf("package worker imports %s; it must reach Redis through broker", imp)
		}
	}
}
