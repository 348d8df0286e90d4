package broker

import (
	"context"
	"io/fs"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/scripts/lua"
)

// fieldValues are the literals a script writes as a job field's value
// beside its name on the lines the scan reads: states and flags.
var fieldValues = []string{"1", "blocked", "pending", "scheduled", "running", "cancelled", "enqueued"}

// jobHashLine finds, on one line of Lua, a command or reader on a job hash
// (not K.limits, K.stats nor the fence script's KEYS[1]) or a table of job
// fields; fieldLiteral finds the quoted names on it.
var (
	jobHashLine  = regexp.MustCompile(`'H(GET|SET|MGET|INCRBY|DEL|EXISTS|SETNX)',\s*(key|ckey|k|JOB\b)|\bread(_job)?\(key|^\s*(local )?(fields|FIELDS|OWED|PREV_SETTLED) = \{|table\.insert\(fields,`)
	fieldLiteral = regexp.MustCompile(`'([a-z_0-9]+)'`)
	luaFieldUse  = regexp.MustCompile(`\bF\.([a-z_0-9]+)`)
	eventName    = regexp.MustCompile(`event\('[a-z_]+'`)
)

// Every job hash field a script names on a job hash command, a reader
// call or a table of fields is in the catalogue.
func TestScriptsUseCataloguedFields(t *testing.T) {
	files, err := fs.Glob(lua.FS, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, name := range files {
		src, err := lua.FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(src), "\n") {
			if !jobHashLine.MatchString(line) && !luaFieldUse.MatchString(line) {
				continue
			}
			for _, m := range luaFieldUse.FindAllStringSubmatch(line, -1) {
				if !slices.Contains(jobFields, m[1]) {
					t.Errorf("%s:%d: F.%s is not in broker/fields.go", name, i+1, m[1])
				}
			}
			line = eventName.ReplaceAllString(line, "")
			for _, m := range fieldLiteral.FindAllStringSubmatch(line, -1) {
				f := m[1]
				seen[f] = true
				if !slices.Contains(jobFields, f) && !slices.Contains(fieldValues, f) {
					t.Errorf("%s:%d: job hash field %q is not in broker/fields.go", name, i+1, f)
				}
			}
		}
	}
	if len(seen) < 20 {
		t.Fatalf("the scan found %d field names: it no longer reads the scripts", len(seen))
	}
}

// Every catalogued field is named by some script or Go reader, so the
// catalogue holds no field that nothing uses.
func TestCatalogueFieldsAreUsed(t *testing.T) {
	files, _ := fs.Glob(lua.FS, "*.lua")
	var all strings.Builder
	for _, name := range files {
		src, _ := lua.FS.ReadFile(name)
		all.Write(src)
	}
	lua := all.String()
	for _, f := range jobFields {
		if !strings.Contains(lua, "'"+f+"'") && !strings.Contains(lua, "F."+f) {
			t.Errorf("catalogued field %q is in no script", f)
		}
	}
}

// The Lua that scriptFields writes names each field as Go does.
func TestScriptFieldsMatchGo(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	src := scriptFields() + `
local out = {}
for _, name in ipairs(ARGV) do
  table.insert(out, F[name])
end
return out`
	args := make([]any, len(jobFields))
	for i, f := range jobFields {
		args[i] = f
	}
	got, err := redis.NewScript(src).Run(context.Background(), rdb, nil, args...).StringSlice()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, jobFields) {
		t.Fatalf("F = %q, want %q", got, jobFields)
	}
	seen := map[string]bool{}
	for _, f := range jobFields {
		if seen[f] {
			t.Errorf("field %q is catalogued twice", f)
		}
		seen[f] = true
	}
}

// browse.lua answers the fields Go's listedFields reads, in that order.
func TestBrowseFieldsMatchGo(t *testing.T) {
	src, err := lua.FS.ReadFile("browse.lua")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?s)local FIELDS = \{(.*?)\}`).FindSubmatch(src)
	if m == nil {
		t.Fatal("browse.lua has no FIELDS table")
	}
	var got []string
	for _, f := range fieldLiteral.FindAllStringSubmatch(string(m[1]), -1) {
		got = append(got, f[1])
	}
	if !slices.Equal(got, listedFields) {
		t.Fatalf("browse.lua FIELDS = %q, listedFields = %q", got, listedFields)
	}
}
