package structure

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
	"github.com/fenceq/fenceq/handlers"
	"github.com/fenceq/fenceq/jobrow"
)

// rowFields are the names and types of jobrow.Row's fields, in order.
func rowFields() ([]string, map[string]reflect.Type) {
	var names []string
	types := map[string]reflect.Type{}
	for f := range reflect.TypeFor[jobrow.Row]().Fields() {
		names = append(names, f.Name)
		types[f.Name] = f.Type
	}
	return names, types
}

// A job's fields are defined once, in jobrow.Row. Each view of a job
// embeds the Row and declares none of its fields again, so a field added
// to Row reaches all of them.
func TestOneRow(t *testing.T) {
	names, _ := rowFields()
	row := reflect.TypeFor[jobrow.Row]()
	for _, typ := range []reflect.Type{
		reflect.TypeFor[broker.Lease](), reflect.TypeFor[broker.JobInfo](),
		reflect.TypeFor[handlers.Job](), reflect.TypeFor[handlers.JobSpec](),
	} {
		t.Run(typ.String(), func(t *testing.T) {
			embed, ok := typ.FieldByName("Row")
			if !ok || !embed.Anonymous || embed.Type != row || len(embed.Index) != 1 {
				t.Fatalf("%s does not embed jobrow.Row: give it the field `jobrow.Row` in place of its own Queue, ID, Kind …", typ)
			}
			for _, f := range reflect.VisibleFields(typ) {
				if slices.Contains(names, f.Name) && f.Index[0] != embed.Index[0] {
					t.Errorf("%s declares %s (%s) again: its Row has it", typ, f.Name, f.Type)
				}
			}
		})
	}
}

// claimOnly are the Row's fields that a job gets when it is claimed: an
// enqueue cannot set them, so broker.Job does not have them.
var claimOnly = []string{"Attempt", "Generation"}

// broker.Job is a job before it has a Row: it has every field of Row but
// claimOnly, by the same name and type. (EnqueueOptions and the JSON form
// follow Job, each held to it by a test in broker.)
func TestJobHasTheRowsEnqueueFields(t *testing.T) {
	names, types := rowFields()
	job := reflect.TypeFor[broker.Job]()
	for _, name := range names {
		f, ok := job.FieldByName(name)
		switch {
		case slices.Contains(claimOnly, name):
			if ok {
				t.Errorf("broker.Job has %s, which only a claim sets: take it out of claimOnly here if an enqueue sets it now", name)
			}
		case !ok:
			t.Errorf("jobrow.Row.%s (%s) has no broker.Job.%s: add it to Job (and to EnqueueOptions, the JSON form and enqueue.lua's arguments), or to claimOnly here if only a claim sets it", name, types[name], name)
		case f.Type != types[name]:
			t.Errorf("broker.Job.%s is %s; jobrow.Row.%s is %s", name, f.Type, name, types[name])
		}
	}
}

// No other struct of the module spells out the whole row again: one that
// carries a job embeds jobrow.Row instead.
func TestNoStructRedeclaresTheRow(t *testing.T) {
	names, _ := rowFields()
	fset := token.NewFileSet()
	root := filepath.Join("..", "..")
	seen := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "jobrow") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		seen++
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.TYPE {
				continue
			}
			for _, spec := range gd.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok || !ts.Name.IsExported() {
					continue
				}
				var declared []string
				for _, fl := range st.Fields.List {
					for _, n := range fl.Names {
						declared = append(declared, n.Name)
					}
				}
				if !slices.ContainsFunc(names, func(n string) bool { return !slices.Contains(declared, n) }) {
					rel, _ := filepath.Rel(root, path)
					t.Errorf("%s: %s declares every field of jobrow.Row (%s): embed jobrow.Row instead", rel, ts.Name.Name, strings.Join(names, ", "))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 {
		t.Fatalf("read only %d Go files under %s: is the walk looking at the module?", seen, root)
	}
}
