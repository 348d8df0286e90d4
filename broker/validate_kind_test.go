package broker_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// ValidateKind refuses the kinds Enqueue refuses, naming the field.
func TestValidateKind(t *testing.T) {
	if err := broker.ValidateKind("send_email"); err != nil {
		t.Errorf("send_email: %v", err)
	}
	for _, bad := range []string{"", "a\x01b", strings.Repeat("k", 201), "\xff"} {
		var ve *broker.ValidationError
		if err := broker.ValidateKind(bad); !errors.As(err, &ve) || ve.Field != "kind" {
			t.Errorf("ValidateKind(%q) = %v; want a *ValidationError for kind", bad, err)
		}
	}
}
