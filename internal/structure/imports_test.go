// Package structure checks which of the module's packages may import
// which, and that a job's fields are defined once (jobrow.Row).
package structure

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

const module = "github.com/fenceq/fenceq"

type pkg struct {
	ImportPath   string
	Standard     bool
	Imports      []string
	TestImports  []string
	XTestImports []string
}

// listPackages is every package the module's packages build with, by
// import path, from `go list -deps -json ./...` run at the module's root.
func listPackages(t *testing.T) map[string]*pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "-json", "./...")
	cmd.Dir = "../.."
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string]*pkg{}
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		p := &pkg{}
		if err := dec.Decode(p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

func ours(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

func under(path, dir string) bool { return path == dir || strings.HasPrefix(path, dir+"/") }

// chain is the import path from "from" to the first package that bad
// matches, through non-test imports ("a -> b -> c"), or "" if there is none.
func chain(pkgs map[string]*pkg, from string, bad func(string) bool) string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		if cur != from && bad(cur) {
			var path []string
			for p := cur; p != ""; p = prev[p] {
				path = append(path, p)
			}
			slices.Reverse(path)
			return strings.Join(path, " -> ")
		}
		p := pkgs[cur]
		if p == nil {
			continue
		}
		for _, imp := range p.Imports {
			if _, seen := prev[imp]; !seen {
				prev[imp] = cur
				queue = append(queue, imp)
			}
		}
	}
	return ""
}

// allImports is what p imports directly, its tests included.
func allImports(p *pkg) []string {
	return slices.Concat(p.Imports, p.TestImports, p.XTestImports)
}

func TestImports(t *testing.T) {
	pkgs := listPackages(t)
	var mine []*pkg
	for _, p := range pkgs {
		if ours(p.ImportPath) {
			mine = append(mine, p)
		}
	}
	slices.SortFunc(mine, func(a, b *pkg) int { return strings.Compare(a.ImportPath, b.ImportPath) })
	for _, want := range []string{"jobrow", "handlers", "broker", "worker", "metrics", "cmd/workerd", "internal/bench", "internal/yamlerr", "internal/dashboard", "api"} {
		if pkgs[module+"/"+want] == nil {
			t.Fatalf("go list did not list %s/%s", module, want)
		}
	}

	// jobrow is the leaf every view of a job embeds: it imports only the
	// standard library, its tests included, so any package may import it.
	for _, imp := range allImports(pkgs[module+"/jobrow"]) {
		if first, _, _ := strings.Cut(imp, "/"); ours(imp) || strings.Contains(first, ".") {
			t.Errorf("jobrow imports %s: it may import only the standard library", imp)
		}
	}

	// Handlers run a job; they know nothing of Redis, the broker or the pool.
	noStore := func(path string) bool {
		return path == module+"/broker" || path == module+"/worker" || under(path, "github.com/redis/go-redis")
	}
	for _, p := range mine {
		if under(p.ImportPath, module+"/handlers") {
			if c := chain(pkgs, p.ImportPath, noStore); c != "" {
				t.Errorf("handlers may not depend on broker, worker or go-redis: %s", c)
			}
		}
	}

	// Commands are programs, never libraries.
	for _, p := range mine {
		for _, imp := range allImports(p) {
			if under(imp, module+"/cmd") {
				t.Errorf("%s imports %s: nothing imports a command", p.ImportPath, imp)
			}
		}
	}

	// internal/bench and internal/yamlerr are workerd's.
	for _, lib := range []string{module + "/internal/bench", module + "/internal/yamlerr"} {
		for _, p := range mine {
			if p.ImportPath == lib || p.ImportPath == module+"/cmd/workerd" {
				continue
			}
			if slices.Contains(allImports(p), lib) {
				t.Errorf("%s imports %s, which only cmd/workerd may import", p.ImportPath, lib)
			}
		}
	}

	// metrics is a library an embedding program uses: no command, no dashboard.
	noCmdOrUI := func(path string) bool {
		return under(path, module+"/cmd") || under(path, module+"/internal/dashboard")
	}
	if c := chain(pkgs, module+"/metrics", noCmdOrUI); c != "" {
		t.Errorf("metrics may not depend on a command or internal/dashboard: %s", c)
	}

	// api is a library a Go service mounts: it enqueues and reads through
	// the broker, and runs no pool, command or dashboard.
	noPoolCmdOrUI := func(path string) bool { return path == module+"/worker" || noCmdOrUI(path) }
	if c := chain(pkgs, module+"/api", noPoolCmdOrUI); c != "" {
		t.Errorf("api may not depend on worker, a command or internal/dashboard: %s", c)
	}

	// The dashboard reads Redis through the broker; it does not run a pool.
	if c := chain(pkgs, module+"/internal/dashboard", func(path string) bool { return path == module+"/worker" }); c != "" {
		t.Errorf("internal/dashboard may not depend on worker: %s", c)
	}
	if slices.Contains(allImports(pkgs[module+"/internal/dashboard"]), module+"/worker") {
		t.Errorf("internal/dashboard (or its tests) imports %s/worker", module)
	}
}
