package broker

import (
	"testing"
	"time"
)

func TestGroupLimitsString(t *testing.T) {
	for l, want := range map[GroupLimits]string{
		{}:                             "no limits",
		{MaxRunning: 2}:                "at most 2 running",
		{Rate: 10, Per: time.Second}:   "at most 10 starts per 1s",
		{MaxRunning: 5, Ordered: true}: "ordered (one at a time)",
		{MaxRunning: 1, Rate: 3, Per: time.Minute, Ordered: true}: "ordered (one at a time), at most 3 starts per 1m0s",
	} {
		if got := l.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", l, got, want)
		}
	}
	for o, want := range map[GroupOverride]string{
		{MaxRunning: true, Limits: GroupLimits{MaxRunning: 5}}:                            "at most 5 running; the rest from the defaults",
		{MaxRunning: true, Rate: true}:                                                    "no max running, no rate; the rest from the defaults",
		{MaxRunning: true, Rate: true, Ordered: true, Limits: GroupLimits{Ordered: true}}: "no max running, no rate, ordered",
		{Rate: true, Ordered: true, Limits: GroupLimits{Rate: 1, Per: time.Hour}}:         "at most 1 starts per 1h0m0s, not ordered; the rest from the defaults",
	} {
		if got := o.String(); got != want {
			t.Errorf("%+v.String() = %q, want %q", o, got, want)
		}
	}
}

// effective takes each limit an override sets, the default for the
// others, and runs an ordered group one at a time.
func TestEffectiveGroupLimits(t *testing.T) {
	def := GroupLimits{MaxRunning: 4, Rate: 10, Per: time.Second}
	for _, tc := range []struct {
		ov   *GroupOverride
		want GroupLimits
	}{
		{nil, def},
		{&GroupOverride{MaxRunning: true}, GroupLimits{Rate: 10, Per: time.Second}},
		{&GroupOverride{Rate: true, Limits: GroupLimits{Rate: 1, Per: time.Minute}}, GroupLimits{MaxRunning: 4, Rate: 1, Per: time.Minute}},
		{&GroupOverride{Ordered: true, Limits: GroupLimits{Ordered: true}}, GroupLimits{MaxRunning: 1, Rate: 10, Per: time.Second, Ordered: true}},
	} {
		if got := effective(def, tc.ov); got != tc.want {
			t.Errorf("effective(%+v, %+v) = %+v, want %+v", def, tc.ov, got, tc.want)
		}
	}
	if got := effective(GroupLimits{Ordered: true}, &GroupOverride{Ordered: true}); got != (GroupLimits{}) {
		t.Errorf("an override that turns ordering off keeps %+v", got)
	}
}
