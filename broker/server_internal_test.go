package broker

import (
	"errors"
	"strings"
	"testing"
)

func TestParseVersion(t *testing.T) {
	for v, want := range map[string][2]int{"7.0.15": {7, 0}, "6.2": {6, 2}, "5": {5, 0}, "garbage": {0, 0}} {
		if ma, mi := parseVersion(v); ma != want[0] || mi != want[1] {
			t.Errorf("parseVersion(%q) = %d.%d, want %d.%d", v, ma, mi, want[0], want[1])
		}
	}
	for v, ok := range map[string]bool{"5.0.7": false, "6.0.0": false, "6.2.0": true, "7.0.15": true, "": true, "4.0": false} {
		err := checkVersion(v)
		if (err == nil) != ok || err != nil && !strings.Contains(err.Error(), "needs Redis 6.2 or newer") {
			t.Errorf("checkVersion(%q) = %v", v, err)
		}
		if err != nil && !errors.Is(err, ErrServerTooOld) {
			t.Errorf("checkVersion(%q) = %v, want one wrapping ErrServerTooOld", v, err)
		}
	}
	if got := infoField("# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "redis_version"); got != "7.0.15" {
		t.Fatalf("infoField = %q", got)
	}
	if got := infoField("# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\n", "used_memory"); got != "1048576" {
		t.Fatalf("infoField(used_memory) = %q, want the field itself, not one it prefixes", got)
	}
}
