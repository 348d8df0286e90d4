package broker

import (
	"context"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/scripts/lua"
)

// fieldValues are the literals a script writes or compares as a job
// field's value inside a job hash command, reader call or table of fields:
// states and flags.
var fieldValues = []string{"1", "blocked", "pending", "scheduled", "running"}

var (
	// jobHashUse finds, in a script with its comments blanked, the start of
	// a command or reader on a job hash (not K.limits, K.stats nor the fence
	// script's KEYS[1]) or of a table of job fields; the bracket it opens
	// runs to its close (luaSpan).
	jobHashUse = regexp.MustCompile(`redis\.p?call\('H(GET|SET|MGET|INCRBY|DEL|EXISTS|SETNX|GETALL)',\s*(key|ckey|k|JOB\b)|` +
		`\bread(_job)?\(|\b(fields|FIELDS|OWED|PREV_SETTLED) = \{|table\.insert\((fields|done_with),|\badd\(|\bbad_int\(`)
	// notJobFields finds the two places where a script quotes a name that
	// is a job field's but names something else: an event's entry in the
	// events stream (lib.lua's XADD) and the event names event() is given.
	notJobFields = regexp.MustCompile(`redis\.call\('XADD',|\bevent\(`)
	fieldLiteral = regexp.MustCompile(`'([a-z_0-9]+)'`)
	luaFieldUse  = regexp.MustCompile(`\bF\.([a-z_0-9]+)`)
)

// Every script names a job hash field as F.<name>, and only a catalogued
// one. The rule the scan holds them to:
//   - every F.<name> is in jobFields;
//   - outside comments, no quoted string is a catalogued field's name,
//     except in the two places notJobFields finds (the events stream's own
//     entry fields, event names);
//   - inside a job hash command, a reader call (read, read_job) or a table
//     of fields (jobHashUse), a quoted word is a value of fieldValues: a
//     quoted field name there that is not catalogued fails too.
func TestScriptsUseCataloguedFields(t *testing.T) {
	files, err := fs.Glob(lua.FS, "*.lua")
	if err != nil {
		t.Fatal(err)
	}
	used, uses := map[string]bool{}, 0
	for _, name := range files {
		src, err := lua.FS.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		code := luaCode(string(src))
		line := func(pos int) int { return strings.Count(code[:pos], "\n") + 1 }
		for _, m := range luaFieldUse.FindAllStringSubmatchIndex(code, -1) {
			f := code[m[2]:m[3]]
			used[f] = true
			if !slices.Contains(jobFields, f) {
				t.Errorf("%s:%d: F.%s is not in broker/fields.go", name, line(m[0]), f)
			}
		}
		for _, m := range jobHashUse.FindAllStringIndex(code, -1) {
			uses++
			end := luaSpan(code, m[0])
			for _, l := range fieldLiteral.FindAllStringSubmatchIndex(code[m[0]:end], -1) {
				f := code[m[0]+l[2] : m[0]+l[3]]
				if !slices.Contains(jobFields, f) && !slices.Contains(fieldValues, f) {
					t.Errorf("%s:%d: job hash field %q is not in broker/fields.go (a value beside a field goes in fieldValues)",
						name, line(m[0]+l[0]), f)
				}
			}
		}
		blanked := []byte(code)
		for _, m := range notJobFields.FindAllStringIndex(code, -1) {
			for i := m[0]; i < luaSpan(code, m[0]); i++ {
				if blanked[i] != '\n' {
					blanked[i] = ' '
				}
			}
		}
		for _, m := range fieldLiteral.FindAllSubmatchIndex(blanked, -1) {
			if f := string(blanked[m[2]:m[3]]); slices.Contains(jobFields, f) {
				t.Errorf("%s:%d: the job hash field '%s' is quoted: name it F.%s", name, line(m[0]), f, f)
			}
		}
	}
	if len(used) < 20 || uses < 50 {
		t.Fatalf("the scan found %d fields named as F.<name> and %d job hash uses: it no longer reads the scripts", len(used), uses)
	}
}

// luaCode is a script with its comments blanked (newlines kept, so
// offsets keep their lines); quoted strings stay whole.
func luaCode(src string) string {
	out := []byte(src)
	var quote byte
	for i := 0; i < len(out); i++ {
		c := out[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && (c == quote || c == '\n'):
			quote = 0
		case quote != 0:
		case c == '\'' || c == '"':
			quote = c
		case c == '-' && i+1 < len(out) && out[i+1] == '-':
			for ; i < len(out) && out[i] != '\n'; i++ {
				out[i] = ' '
			}
		}
	}
	return string(out)
}

// luaSpan is the end of the bracket that opens first at or after from in
// code (a call's parenthesis, a table's brace), past its close; brackets
// inside quoted strings do not count.
func luaSpan(code string, from int) int {
	depth := 0
	var quote byte
	for i := from; i < len(code); i++ {
		c := code[i]
		switch {
		case quote != 0 && c == '\\':
			i++
		case quote != 0 && c == quote:
			quote = 0
		case quote != 0:
		case c == '\'' || c == '"':
			quote = c
		case c == '(' || c == '{':
			depth++
		case (c == ')' || c == '}') && depth > 0:
			depth--
			if depth == 0 {
				return i + 1
			}
		}
	}
	return len(code)
}

// Every catalogued field is named by some script, as F.<name>, so the
// catalogue holds no field that nothing uses.
func TestCatalogueFieldsAreUsed(t *testing.T) {
	files, _ := fs.Glob(lua.FS, "*.lua")
	var all strings.Builder
	for _, name := range files {
		src, _ := lua.FS.ReadFile(name)
		all.WriteString(luaCode(string(src)))
	}
	named := map[string]bool{}
	for _, m := range luaFieldUse.FindAllStringSubmatch(all.String(), -1) {
		named[m[1]] = true
	}
	for _, f := range jobFields {
		if !named[f] {
			t.Errorf("catalogued field %q is in no script", f)
		}
	}
}

// broker's Go names a job hash field by its constant: no string literal
// that is a catalogued field's name is an argument of a hash command
// (HGet, HMGet, HSet, ...).
func TestGoUsesCataloguedFields(t *testing.T) {
	hashCmds := []string{"HGet", "HMGet", "HSet", "HSetNX", "HDel", "HIncrBy", "HExists"}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	calls := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || !slices.Contains(hashCmds, sel.Sel.Name) || len(call.Args) < 2 {
				return true
			}
			calls++
			for _, arg := range call.Args[2:] { // after ctx and the key
				lit, ok := arg.(*ast.BasicLit)
				if !ok || lit.Kind != token.STRING {
					continue
				}
				if f, err := strconv.Unquote(lit.Value); err == nil && slices.Contains(jobFields, f) {
					t.Errorf("%s: %s names the job hash field %q by a literal: use its constant in fields.go",
						fset.Position(lit.Pos()), sel.Sel.Name, f)
				}
			}
			return true
		})
	}
	if calls < 5 {
		t.Fatalf("the scan found %d hash commands in broker's Go: it no longer reads them", calls)
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
	for _, f := range luaFieldUse.FindAllStringSubmatch(string(m[1]), -1) {
		got = append(got, f[1])
	}
	if !slices.Equal(got, listedFields) {
		t.Fatalf("browse.lua FIELDS = %q, listedFields = %q", got, listedFields)
	}
}
