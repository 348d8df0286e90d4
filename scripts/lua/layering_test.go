package lua_test

import (
	"os/exec"
	"strings"
	"testing"
)

// Only the broker and fence packages run the scripts; any other package
// that imports this one reaches around the broker's guards.
func TestOnlyBrokerAndFenceImportScripts(t *testing.T) {
	const self = "github.com/fenceq/fenceq/scripts/lua"
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}} {{join .TestImports " "}} {{join .XTestImports " "}}`, "github.com/fenceq/fenceq/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/fenceq/fenceq/broker": true,
		"github.com/fenceq/fenceq/fence":  true,
		self:                              true,
	}
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		pkg := fields[0]
		for _, imp := range fields[1:] {
			if imp != self {
				continue
			}
			seen++
			if !allowed[pkg] {
				t.Errorf("%s imports %s; only broker and fence may (the scripts are not an API)", pkg, self)
			}
		}
	}
	if seen == 0 {
		t.Fatal("go list found no package importing the scripts: the check reads the wrong module")
	}
}
