package dashboard

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// cut bounds what a message or log line repeats of a value sent in, and
// cuts no character in two.
func TestCutBoundsBytes(t *testing.T) {
	for _, s := range []string{strings.Repeat("9", 20000), strings.Repeat("é", 20000), "a" + strings.Repeat("😀", 5000), "short"} {
		for _, n := range []int{1, 2, 3, 100, 101} {
			got := cut(s, n)
			if len(got) > n+len("…") || !utf8.ValidString(got) {
				t.Errorf("cut(%d bytes of %q…, %d) = %q: %d bytes, valid UTF-8 %v", len(s), s[:1], n, got, len(got), utf8.ValidString(got))
			}
			if len(s) <= n && got != s {
				t.Errorf("cut(%q, %d) = %q, want it whole", s, n, got)
			}
		}
	}
}
