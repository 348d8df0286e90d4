package broker

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// ValidateGroup takes "" (no group) and plain names, and refuses what
// Enqueue refuses, naming the field.
func TestValidateGroup(t *testing.T) {
	for _, good := range []string{"", "acme", "tenant 42", "ключ", strings.Repeat("g", MaxGroupBytes)} {
		if err := ValidateGroup(good); err != nil {
			t.Errorf("ValidateGroup(%q) = %v, want nil", good, err)
		}
	}
	b, _ := miniBroker(t)
	for _, bad := range []string{strings.Repeat("g", MaxGroupBytes+1), "\xff", "a\x01b", "a\tb", "a\u0085b",
		" acme", "acme ", "acme\n", "\u00a0acme", "acme\u3000"} {
		var ve *ValidationError
		if err := ValidateGroup(bad); !errors.As(err, &ve) || ve.Field != "group" || ve.Reason == "" {
			t.Errorf("ValidateGroup(%q) = %v; want a *ValidationError for group", bad, err)
		}
		_, err := b.Client().Enqueue(context.Background(), Job{Queue: "q", Kind: "k", Group: bad})
		if !errors.As(err, &ve) || ve.Field != "group" {
			t.Errorf("Enqueue with group %q: %v; want a *ValidationError for group", bad, err)
		}
	}
}
