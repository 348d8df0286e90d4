package yamlerr

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// FieldError is a mistake at one field of the file. Line 0 means
// "look it up by path".
type FieldError struct {
	Path string // pools[0].queues[1], handlers.send_email.exec.command; "" for the file as a whole
	Line int
	Msg  string
}

func (e *FieldError) Error() string { return e.Msg }

// Fieldf is a FieldError at path, found by its path.
func Fieldf(path, format string, args ...any) *FieldError {
	return &FieldError{Path: path, Msg: fmt.Sprintf(format, args...)}
}

// NodeError is a mistake found by an UnmarshalYAML method, which knows the
// node but not its path.
type NodeError struct {
	line, column int
	msg          string
}

func (e *NodeError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// Nodef is a NodeError at n.
func Nodef(n *yaml.Node, format string, args ...any) *NodeError {
	return &NodeError{line: n.Line, column: n.Column, msg: fmt.Sprintf(format, args...)}
}

// fieldPos is where one field (or list item) of the file is.
type fieldPos struct {
	path     string
	key, val *yaml.Node // key is nil for list items and the document
}

// Index lists every field of a parsed file with its path.
type Index []fieldPos

// NewIndex indexes a parsed file.
func NewIndex(doc *yaml.Node) Index {
	var idx Index
	var walk func(path string, key, n *yaml.Node)
	walk = func(path string, key, n *yaml.Node) {
		idx = append(idx, fieldPos{path: path, key: key, val: n})
		switch n.Kind {
		case yaml.DocumentNode:
			for _, c := range n.Content {
				walk(path, nil, c)
			}
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				walk(JoinPath(path, k.Value), k, n.Content[i+1])
			}
		case yaml.SequenceNode:
			for i, c := range n.Content {
				walk(fmt.Sprintf("%s[%d]", path, i), nil, c)
			}
		}
		// Aliases are not followed: they may refer to their own ancestors.
	}
	walk("", nil, doc)
	return idx
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// JoinPath is the path of field key of the map at path.
func JoinPath(path, key string) string {
	if !plainKey.MatchString(key) {
		return fmt.Sprintf("%s[%s]", path, strconv.Quote(key))
	}
	if path == "" {
		return key
	}
	return path + "." + key
}

// parentPath is the path of the map or list that holds path.
func parentPath(path string) string {
	if i := strings.LastIndexAny(path, ".["); i > 0 {
		return path[:i]
	}
	return ""
}

// line is the line of path, or of its nearest ancestor that the file has
// (a missing field is reported where its parent is); 0 if none.
func (idx Index) line(path string) int {
	for {
		for _, f := range idx {
			if f.path == path && path != "" {
				if f.key != nil {
					return f.key.Line
				}
				return f.val.Line
			}
		}
		if path = parentPath(path); path == "" {
			return 0
		}
	}
}

// at finds the field whose value, or whose key when key is set, is at line
// and satisfies match.
func (idx Index) at(line int, key bool, match func(*yaml.Node) bool) (fieldPos, bool) {
	for _, f := range idx {
		n := f.val
		if key {
			n = f.key
		}
		if n != nil && n.Line == line && match(n) {
			return f, true
		}
	}
	return fieldPos{}, false
}

// describe formats one error of file path: "FILE: line N: FIELD: message".
func describe(file string, line int, field, msg string) string {
	var b strings.Builder
	b.WriteString(file)
	if line > 0 {
		fmt.Fprintf(&b, ": line %d", line)
	}
	if field != "" {
		b.WriteString(": " + field)
	}
	b.WriteString(": " + msg)
	return b.String()
}

// Schema describes the Go types a file is decoded into, so that messages
// name them the way the file's reader knows them.
type Schema struct {
	Package string                  // the Go package of the types, as yaml names it ("main")
	Types   map[string]reflect.Type // struct types by Go name ("poolConfig")
	Names   map[string]string       // what each struct type is called in a message ("a pool")
	Wanted  map[string]string       // what to write for a Go type not handled here ("[]main.poolConfig")
}

// Error turns what decoding or checking file found (a *FieldError, a
// *NodeError, a *yaml.TypeError or another yaml error) into one error that
// names the file, the line, the field and the fix.
func (s *Schema) Error(file string, idx Index, err error) error {
	var fe *FieldError
	var ne *NodeError
	var te *yaml.TypeError
	switch {
	case errors.As(err, &fe):
		line := fe.Line
		if line == 0 {
			line = idx.line(fe.Path)
		}
		return errors.New(describe(file, line, fe.Path, fe.Msg))
	case errors.As(err, &ne):
		f, _ := idx.at(ne.line, false, func(n *yaml.Node) bool { return n.Column == ne.column })
		return errors.New(describe(file, ne.line, f.path, ne.msg))
	case errors.As(err, &te):
		msgs := make([]string, len(te.Errors))
		for i, e := range te.Errors {
			msgs[i] = s.typeErrorMessage(file, idx, e)
		}
		return errors.New(strings.Join(msgs, "\n"))
	}
	return errors.New(describe(file, 0, "", strings.TrimPrefix(err.Error(), "yaml: ")))
}

var (
	cannotUnmarshal = regexp.MustCompile("^line (\\d+): cannot unmarshal !!(\\w+)(?: `(.*)`)? into (.+)$")
	unknownField    = regexp.MustCompile(`^line (\d+): field (.+) not found in type ([\w.]+)$`)
	atLine          = regexp.MustCompile(`^line (\d+): (.*)$`)
)

// typeErrorMessage rewrites one of yaml's unmarshal errors.
func (s *Schema) typeErrorMessage(file string, idx Index, e string) string {
	if m := cannotUnmarshal.FindStringSubmatch(e); m != nil {
		line, _ := strconv.Atoi(m[1])
		tag, value, into := m[2], m[3], m[4]
		f, _ := idx.at(line, false, func(n *yaml.Node) bool {
			return strings.TrimPrefix(n.ShortTag(), "!!") == tag && (value == "" || n.Value == value ||
				strings.HasSuffix(value, "...") && strings.HasPrefix(n.Value, strings.TrimSuffix(value, "...")))
		})
		got := Kinds[tag]
		if f.val != nil && f.val.Kind == yaml.ScalarNode {
			got = fmt.Sprintf("%s is %s", strconv.Quote(Short(f.val.Value)), got)
		} else if value != "" {
			got = fmt.Sprintf("%s is %s", strconv.Quote(value), got)
		} else {
			got = "this is " + got
		}
		return describe(file, line, f.path, fmt.Sprintf("%s; write %s", got, s.goTypeWanted(into)))
	}
	if m := unknownField.FindStringSubmatch(e); m != nil && strings.HasPrefix(m[3], s.Package+".") {
		line, _ := strconv.Atoi(m[1])
		name, typ := m[2], strings.TrimPrefix(m[3], s.Package+".")
		f, _ := idx.at(line, true, func(n *yaml.Node) bool { return n.Value == name })
		return describe(file, line, parentPath(f.path), s.UnknownField(name, typ))
	}
	if m := atLine.FindStringSubmatch(e); m != nil {
		line, _ := strconv.Atoi(m[1])
		return describe(file, line, "", m[2])
	}
	return describe(file, 0, "", e)
}

// Kinds names the YAML tags of scalar and collection values.
var Kinds = map[string]string{
	"str": "text", "int": "a number", "float": "a number", "bool": "a boolean", "null": "an empty value",
	"seq": "a list", "map": "a map", "binary": "a binary value", "timestamp": "a timestamp",
}

// goTypeWanted says, for the Go type a value was decoded into, what to write.
func (s *Schema) goTypeWanted(t string) string {
	t = strings.TrimLeft(t, "*")
	switch t {
	case "string":
		return "text"
	case "int":
		return "a whole number, like 10"
	case "bool":
		return "true or false"
	case "[]string":
		return "a list of text items, like [./send-email, --verbose]"
	case "[]int":
		return "a list of whole numbers, like [2, 3]"
	case "map[string]string":
		return "a map of names to text, like {KEY: value}"
	}
	if w, ok := s.Wanted[t]; ok {
		return w
	}
	if name, ok := strings.CutPrefix(t, s.Package+"."); ok {
		if typ, ok := s.Types[name]; ok {
			return fmt.Sprintf("a map with the fields of %s (%s)", s.Names[name], strings.Join(Fields(typ), ", "))
		}
	}
	return "a value of the documented type (see the README's configuration reference)"
}

// Fields lists the field names of a config struct, in order.
func Fields(t reflect.Type) []string {
	var names []string
	for i := range t.NumField() {
		if name, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ","); name != "" && name != "-" {
			names = append(names, name)
		}
	}
	return names
}

// UnknownField says that the struct type typ (a Go name of s.Types) has no
// field name.
func (s *Schema) UnknownField(name, typ string) string {
	where, fields := s.Names[typ], []string(nil)
	if t, ok := s.Types[typ]; ok {
		fields = Fields(t)
	}
	if where == "" {
		where = typ
	}
	return UnknownFieldIn(name, where, fields)
}

// UnknownFieldIn says that where has no field name, suggesting the one of
// fields it is closest to, or listing them.
func UnknownFieldIn(name, where string, fields []string) string {
	best, bestDist := "", 3 // suggest only near misses
	for _, f := range fields {
		if d := editDistance(strings.ToLower(name), f); d < bestDist {
			best, bestDist = f, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown field %q in %s; did you mean %q?", name, where, best)
	}
	return fmt.Sprintf("unknown field %q in %s, which has: %s (see the README's configuration reference)", name, where, strings.Join(fields, ", "))
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// maxLocateLines bounds the files whose syntax errors are located line by
// line (each try parses a prefix of the file).
const maxLocateLines = 500

// SyntaxError explains a file the YAML parser refused. The parser names the
// line where the enclosing block began, often the first line of the file;
// the line that broke the structure is the one after the longest prefix of
// the file that still parses.
func SyntaxError(file string, data []byte, err error) error {
	raw := strings.TrimPrefix(err.Error(), "yaml: ")
	problem := raw
	line := 0
	if m := atLine.FindStringSubmatch(raw); m != nil {
		line, _ = strconv.Atoi(m[1])
		problem = m[2]
	}
	lines := bytes.SplitAfter(data, []byte("\n"))
	if len(lines) <= maxLocateLines {
		for n := len(lines) - 1; n >= 0; n-- {
			var probe yaml.Node
			if yaml.Unmarshal(bytes.Join(lines[:n], nil), &probe) == nil {
				line = n + 1
				break
			}
		}
	}
	text := ""
	if line >= 1 && line <= len(lines) {
		text = strings.TrimRight(string(lines[line-1]), "\r\n")
	}
	var hint string
	switch {
	case strings.HasPrefix(strings.TrimLeft(text, " "), "\t") || strings.Contains(problem, "cannot start any token") && strings.Contains(text, "\t"):
		hint = "YAML does not allow tabs for indentation; indent with spaces"
	case strings.Contains(problem, "expected ',' or '}'"), strings.Contains(problem, "expected ',' or ']'"):
		hint = "a { or [ opened here is not closed; close it, or separate its items with commas"
	case strings.Contains(problem, "expected '-' indicator"), strings.Contains(problem, "expected key"),
		strings.Contains(problem, "mapping values are not allowed"), strings.Contains(problem, "block sequence entries are not allowed"):
		hint = "check this line's indentation: a field is indented further than the field it belongs to, " +
			"and the fields of one map (or the '- ' items of one list) start in the same column"
	case strings.Contains(problem, "unexpected end of stream"), strings.Contains(problem, "found unexpected end"):
		hint = "a quoted string begun here is not closed"
	default:
		hint = "the YAML parser says: " + problem
	}
	msg := "this is not valid YAML"
	if text != "" {
		msg = fmt.Sprintf("this line is not valid YAML here: %q", strings.TrimSpace(text))
	}
	return errors.New(describe(file, line, "", msg+"; "+hint))
}

// Short is s cut to 60 bytes, for quoting a value in a message.
func Short(s string) string {
	if len(s) > 60 {
		return s[:57] + "..."
	}
	return s
}
