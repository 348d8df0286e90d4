package yamlerr

import (
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestJoinPath(t *testing.T) {
	for _, c := range []struct{ path, key, want string }{
		{"", "pools", "pools"},
		{"handlers", "send_email", "handlers.send_email"},
		{"handlers", "a.b", `handlers["a.b"]`},
	} {
		if got := JoinPath(c.path, c.key); got != c.want {
			t.Errorf("JoinPath(%q, %q) = %q; want %q", c.path, c.key, got, c.want)
		}
	}
}

func TestUnknownFieldIn(t *testing.T) {
	if got := UnknownFieldIn("leese", "a pool", []string{"queues", "lease"}); !strings.Contains(got, `did you mean "lease"?`) {
		t.Errorf("near miss: %s", got)
	}
	if got := UnknownFieldIn("zzzzzz", "a pool", []string{"queues", "lease"}); !strings.Contains(got, "which has: queues, lease") {
		t.Errorf("far miss: %s", got)
	}
}

func TestFieldErrorLine(t *testing.T) {
	data := []byte("pools:\n  - queues: [a]\n    lease: 3\n")
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	s := &Schema{Package: "main"}
	err := s.Error("c.yaml", NewIndex(&doc), Fieldf("pools[0].lease", "too short"))
	if want := "c.yaml: line 3: pools[0].lease: too short"; err.Error() != want {
		t.Errorf("got %q; want %q", err, want)
	}
	// A missing field is reported at its nearest ancestor.
	err = s.Error("c.yaml", NewIndex(&doc), Fieldf("pools[0].retention", "missing"))
	if want := "c.yaml: line 2: pools[0].retention: missing"; err.Error() != want {
		t.Errorf("got %q; want %q", err, want)
	}
}

func TestSyntaxErrorTab(t *testing.T) {
	data := []byte("pools:\n  - queues: [a]\n\tconcurrency: 2\n")
	var doc yaml.Node
	perr := yaml.Unmarshal(data, &doc)
	if perr == nil {
		t.Fatal("the file parsed")
	}
	err := SyntaxError("c.yaml", data, perr)
	if !strings.Contains(err.Error(), "line 3") || !strings.Contains(err.Error(), "tabs") {
		t.Errorf("got %q; want line 3 and the tab hint", err)
	}
}
