package broker_test

import (
	"reflect"
	"slices"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// Each audience has its own type, so a producer does not scroll past the
// dashboard's readers and *Broker does not grow back into one type that
// serves everyone. A new method goes on the view of its audience, and on
// this list: a method added to the wrong type fails here.
func TestViewsByAudience(t *testing.T) {
	for _, tc := range []struct {
		typ  reflect.Type
		want []string
	}{
		{reflect.TypeFor[*broker.Broker](), []string{
			"CheckServer", "Client", "FunctionLibrary", "Inspector", "Leases",
			"LoadScripts", "PoolSize", "Prefix", "Schedules", "ScriptsLoaded", "TracerProvider"}},
		{reflect.TypeFor[*broker.Schedules](), []string{
			"Add", "Get", "List", "Pause", "PublishConfig", "RecordRun", "Remove", "Resume", "Set", "Stored", "Version"}},
		{reflect.TypeFor[*broker.Client](), []string{
			"Enqueue", "EnqueueArgs", "EnqueueMany", "TracerProvider", "ValidateJob", "Wait"}},
		{reflect.TypeFor[*broker.Leases](), []string{
			"Ack", "AckMany", "Claim", "ClaimRequest", "Fail", "FusedAck", "FusedFail",
			"FusedSnooze", "GiveBack", "Progress", "Reap", "RegisterWorker", "Release", "Renew", "Snooze",
			"Trim", "WaitForWork"}},
		{reflect.TypeFor[*broker.Inspector](), []string{
			"Cancel", "ChangeGroupLimits", "ChangeLimits", "Check", "Counts", "DeadSince", "Delete", "EndSession", "Events", "EventsKept",
			"ExpiredLeases", "Footprint", "GroupLimits", "Groups", "Job", "JobHolder", "JobLinks", "JobListed", "JobPage", "Jobs",
			"Leases", "Limits", "Overview", "Pause", "Paused", "Prefix", "Promote", "Purge", "PurgeThrough", "QueueExists",
			"QueueMemory", "Queues", "RecentEvents", "RedisTime", "ReleaseUnowned", "Resume",
			"Retry", "RetryDead", "Schedules", "ServerMemory", "SessionActive", "SetEvents", "SetLimits",
			"SetMaxRunning", "SetRate", "StartSession", "Throughput", "Workers"}},
	} {
		var got []string
		for i := range tc.typ.NumMethod() {
			got = append(got, tc.typ.Method(i).Name)
		}
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Errorf("%v's methods:\n got %v\nwant %v\n(a method belongs to the view of its audience; add it to this list there)", tc.typ, got, want)
		}
	}
}
