package broker

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/scripts/lua"
)

// The scripts keep what a re-send needs for ResendHorizon: lib.lua's
// RESEND_HORIZON_MS is the same, and the broker's own re-sends start
// within it.
func TestResendHorizonIsLibLuas(t *testing.T) {
	src, err := lua.FS.ReadFile("lib.lua")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("local RESEND_HORIZON_MS = %d\n", ResendHorizon.Milliseconds())
	if !strings.Contains(string(src), want) {
		t.Fatalf("lib.lua does not say %q: the scripts' horizon is not broker.ResendHorizon", strings.TrimSpace(want))
	}
	if resendWindow > ResendHorizon {
		t.Fatalf("resendWindow %v exceeds ResendHorizon %v", resendWindow, ResendHorizon)
	}
}
