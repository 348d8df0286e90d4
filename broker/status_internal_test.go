package broker

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/scripts/lua"
)

// The scripts and the broker read one list of reply statuses: lib.lua's
// STATUS table must hold exactly statusNames, code for code.
func TestStatusCodesAgree(t *testing.T) {
	src, err := lua.FS.ReadFile("lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(src), "\nlocal STATUS = {\n")
	if !ok {
		t.Fatal("lib.lua has no STATUS table")
	}
	table, _, _ = strings.Cut(table, "\n}\n")
	entry := regexp.MustCompile(`^\s*([a-z_]+) = (\d+),`)
	inLua := map[string]status{}
	for line := range strings.SplitSeq(table, "\n") {
		m := entry.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("lib.lua STATUS: cannot read %q", line)
		}
		n, _ := strconv.ParseInt(m[2], 10, 64)
		inLua[m[1]] = status(n)
	}
	if len(inLua) != len(statusNames) {
		t.Errorf("lib.lua has %d statuses, broker %d", len(inLua), len(statusNames))
	}
	for code, name := range statusNames {
		if got, ok := inLua[name]; !ok || got != code {
			t.Errorf("status %q: lib.lua says %d (present %v), broker %d", name, got, ok, code)
		}
	}
}

// Every script that names a status names one of the table's.
func TestScriptsUseKnownStatuses(t *testing.T) {
	known := map[string]bool{}
	for _, name := range statusNames {
		known[name] = true
	}
	use := regexp.MustCompile(`STATUS\.([a-z_]+)`)
	files, err := lua.FS.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		src, err := lua.FS.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range use.FindAllStringSubmatch(string(src), -1) {
			if !known[m[1]] {
				t.Errorf("%s uses STATUS.%s, which lib.lua does not define", f.Name(), m[1])
			}
		}
	}
}
