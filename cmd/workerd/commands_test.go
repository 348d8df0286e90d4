package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// Every command of commands() is listed in 'workerd --help', in the
// package doc at the top of main.go and in the README's command table: a
// new command that is missing from any of them fails here.
func TestEveryCommandIsListed(t *testing.T) {
	code, help, _ := runBare("--help")
	if code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	doc, _, _ := strings.Cut(string(src), "\npackage main")
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range commands() {
		name := regexp.QuoteMeta(c.name)
		for _, where := range []struct {
			what, text string
			pattern    string
		}{
			{"workerd --help", help, `(?m)^  ` + name + ` +\S`},
			{"the package doc of cmd/workerd (main.go)", doc, `(?m)^//\tworkerd ` + name + `\b`},
			// In the first cell of a row, where "\|" is a pipe of the text.
			{"README's command table", string(readme), "(?m)^\\| (?:[^|\n]|\\\\\\|)*`workerd " + name + "\\b"},
		} {
			if !regexp.MustCompile(where.pattern).MatchString(where.text) {
				t.Errorf("command %q is missing from %s", c.name, where.what)
			}
		}
	}
}
