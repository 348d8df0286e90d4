package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/fenceq/fenceq/broker"
)

type openAPIDoc struct {
	OpenAPI string                                 `json:"openapi"`
	Paths   map[string]map[string]openAPIOperation `json:"paths"`
	Comps   struct {
		Schemas map[string]openAPISchema `json:"schemas"`
	} `json:"components"`
}

type openAPIOperation struct {
	OperationID string                    `json:"operationId"`
	Security    *[]map[string][]string    `json:"security"`
	Responses   map[string]map[string]any `json:"responses"`
	Parameters  []openAPIParam            `json:"parameters"`
}

type openAPIParam struct {
	Name, In string
	Required bool
}

type openAPISchema struct {
	Properties map[string]struct {
		Enum []string `json:"enum"`
	} `json:"properties"`
	Required []string `json:"required"`
}

func readDoc(t *testing.T) openAPIDoc {
	t.Helper()
	var doc openAPIDoc
	if err := json.Unmarshal(openAPI, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Fatalf("openapi.json is version %q, want 3.x", doc.OpenAPI)
	}
	return doc
}

func testServer(t *testing.T) *Server {
	t.Helper()
	mr := miniredis.RunT(t)
	b, err := broker.New(redis.NewClient(&redis.Options{Addr: mr.Addr()}), broker.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Broker: b, Token: strings.Repeat("t", TokenMinBytes)})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Every route the mux serves is an operation of the document, and every
// operation of the document is a route: same path, same method, and a
// token required unless the route is public.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc := readDoc(t)
	s := testServer(t)
	documented := map[string]openAPIOperation{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			documented[strings.ToUpper(method)+" "+path] = op
		}
	}
	ids := map[string]bool{}
	for _, rt := range s.routes() {
		op, ok := documented[rt.pattern()]
		if !ok {
			t.Errorf("route %s is missing from openapi.json", rt.pattern())
			continue
		}
		delete(documented, rt.pattern())
		// The mux serves the route at its path (wildcards filled in).
		path := strings.NewReplacer("{queue}", "q", "{id}", "i").Replace(rt.path)
		if _, pattern := s.mux.Handler(httptest.NewRequest(rt.method, path, nil)); pattern != rt.pattern() {
			t.Errorf("%s %s is served by %q, not by its route %q", rt.method, path, pattern, rt.pattern())
		}
		public := op.Security != nil && len(*op.Security) == 0
		if public != rt.public {
			t.Errorf("%s: public %v in openapi.json (security: []), %v in the routes", rt.pattern(), public, rt.public)
		}
		for status, resp := range op.Responses {
			if n, err := strconv.Atoi(status); err != nil || n < 200 || n > 599 {
				t.Errorf("%s: response %q is not a status", rt.pattern(), status)
			}
			if d, _ := resp["description"].(string); d == "" {
				t.Errorf("%s: response %s has no description (OpenAPI requires one)", rt.pattern(), status)
			}
		}
		if op.OperationID == "" || ids[op.OperationID] {
			t.Errorf("%s: operationId %q is empty or used twice", rt.pattern(), op.OperationID)
		}
		ids[op.OperationID] = true
		// Each wildcard of the path is a required path parameter.
		for _, seg := range strings.Split(rt.path, "/") {
			if !strings.HasPrefix(seg, "{") {
				continue
			}
			name := strings.Trim(seg, "{}")
			if !slices.Contains(op.Parameters, openAPIParam{Name: name, In: "path", Required: true}) {
				t.Errorf("%s: the path parameter %s is not declared (in: path, required)", rt.pattern(), name)
			}
		}
		if !rt.public && op.Responses["401"] == nil {
			t.Errorf("%s needs the token but documents no 401", rt.pattern())
		}
	}
	for pattern := range documented {
		t.Errorf("openapi.json documents %s, which no route serves", pattern)
	}
}

// jsonFields are the JSON names of a struct type's fields, and those of
// them written always (no omitempty).
func jsonFields(t reflect.Type) (all, always []string) {
	for i := range t.NumField() {
		name, opts, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "-" || !t.Field(i).IsExported() {
			continue
		}
		all = append(all, name)
		if !strings.Contains(opts, "omitempty") {
			always = append(always, name)
		}
	}
	return all, always
}

// Every field of every request and answer is a property of its schema,
// and every property a field; a field always written is required, and
// an omitempty one is not. A job's input is the job codec's form.
func TestOpenAPIMatchesTypes(t *testing.T) {
	doc := readDoc(t)
	types := map[string]reflect.Type{
		"Enqueued":      reflect.TypeFor[enqueued](),
		"BatchRequest":  reflect.TypeFor[batchRequest](),
		"BatchResponse": reflect.TypeFor[batchResponse](),
		"BatchItem":     reflect.TypeFor[batchItem](),
		"Job":           reflect.TypeFor[jobJSON](),
		"AttemptError":  reflect.TypeFor[attemptJSON](),
		"Changed":       reflect.TypeFor[changed](),
		"ErrorResponse": reflect.TypeFor[errorResponse](),
		"Error":         reflect.TypeFor[apiError](),
	}
	check := func(name string, fields, required []string) {
		sc, ok := doc.Comps.Schemas[name]
		if !ok {
			t.Errorf("schema %s is missing from openapi.json", name)
			return
		}
		for _, f := range fields {
			if _, ok := sc.Properties[f]; !ok {
				t.Errorf("schema %s lacks the field %q", name, f)
			}
		}
		for p := range sc.Properties {
			if !slices.Contains(fields, p) {
				t.Errorf("schema %s has the property %q, which is no field of its type", name, p)
			}
		}
		if required == nil {
			return
		}
		slices.Sort(required)
		got := slices.Sorted(slices.Values(sc.Required))
		if !slices.Equal(got, required) {
			t.Errorf("schema %s requires %v; the fields always written are %v", name, got, required)
		}
	}
	for name, typ := range types {
		all, always := jsonFields(typ)
		check(name, all, always)
	}
	check("JobInput", broker.JobFields(), nil)
	for name := range doc.Comps.Schemas {
		if _, ok := types[name]; !ok && name != "JobInput" {
			t.Errorf("openapi.json has the schema %s, which is no type of the API", name)
		}
	}
	// Every $ref names a schema.
	for _, ref := range refs(t) {
		if _, ok := doc.Comps.Schemas[strings.TrimPrefix(ref, "#/components/schemas/")]; !ok {
			t.Errorf("openapi.json refers to %s, which it does not define", ref)
		}
	}
	// The codes of Error are the Code constants.
	codes := slices.Sorted(slices.Values(doc.Comps.Schemas["Error"].Properties["code"].Enum))
	if want := codeConstants(t); !slices.Equal(codes, want) {
		t.Errorf("openapi.json's error codes are %v; the Code constants are %v", codes, want)
	}
}

func refs(t *testing.T) []string {
	var v any
	if err := json.Unmarshal(openAPI, &v); err != nil {
		t.Fatal(err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if s, ok := e.(string); ok && k == "$ref" {
					out = append(out, s)
				}
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// codeConstants are the values of the Code… constants of errors.go.
func codeConstants(t *testing.T) []string {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		if vs, ok := n.(*ast.ValueSpec); ok && len(vs.Names) == 1 && strings.HasPrefix(vs.Names[0].Name, "Code") {
			if lit, ok := vs.Values[0].(*ast.BasicLit); ok {
				s, _ := strconv.Unquote(lit.Value)
				out = append(out, s)
			}
		}
		return true
	})
	slices.Sort(out)
	if len(out) == 0 {
		t.Fatal("found no Code constants in errors.go")
	}
	return out
}

// Every field of a job as the broker reads it (broker.JobInfo and its
// jobrow.Row) is shown by the API's view of a job, or is named here as
// left out: a field added to the job fails this test until it is one or
// the other.
func TestJobViewShowsEveryField(t *testing.T) {
	leftOut := map[string]string{
		"ClaimID":  "a fingerprint of the claim, for operators (workerd inspect, the dashboard)",
		"Renewals": "a display counter for operators",
	}
	view := map[string]bool{}
	all, _ := jsonFields(reflect.TypeFor[jobJSON]())
	for _, f := range all {
		view[f] = true
	}
	var walk func(reflect.Type)
	walk = func(typ reflect.Type) {
		for i := range typ.NumField() {
			f := typ.Field(i)
			if f.Anonymous {
				walk(f.Type)
				continue
			}
			name := snake(f.Name)
			switch {
			case leftOut[f.Name] != "":
			case f.Name == "Result" || f.Name == "Payload" || f.Name == "Progress":
				if !view[name] || !view[name+"_base64"] {
					t.Errorf("JobInfo.%s: the view lacks %s or %s_base64", f.Name, name, name)
				}
			case !view[name]:
				t.Errorf("JobInfo.%s is not in the API's view of a job (no %q): show it, or name it in leftOut with the reason", f.Name, name)
			}
		}
	}
	walk(reflect.TypeFor[broker.JobInfo]())
}

// snake is a Go field name in the JSON form's spelling: MaxAttempts →
// max_attempts, ID → id.
func snake(s string) string {
	var b strings.Builder
	for i, r := range s {
		upper := r >= 'A' && r <= 'Z'
		if upper && i > 0 && !(s[i-1] >= 'A' && s[i-1] <= 'Z') {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToLower(r))
	}
	return b.String()
}
