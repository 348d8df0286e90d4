package pooltest

import "testing"

// Run runs every pool scenario against the Redis that nc connects to.
func Run(t *testing.T, nc NewClient) {
	tests := []struct {
		name string
		fn   func(*testing.T, NewClient)
	}{
		{"RecoversDeadPoolsLeaseWithoutRestart", testRestartCase},
		{"SlowHandlerThatRenewsIsNotStolen", testSlowHandler},
		{"StolenJobsLateAckIsStale", testLateAck},
		{"LostLeaseCancelsHandlerAndDiscardsResult", testLostLease},
		{"ContinuousWorkDoesNotStarveRecovery", testNoStarvation},
		{"GracefulShutdownReleasesToAnotherPool", testGracefulShutdown},
		{"HandlerResults", testResults},
		{"UnknownKindWaitsForItsPool", testUnknownKindWaitsForItsPool},
		{"UnknownKindBound", testUnknownKindBound},
		{"UnknownKindInsideAHandler", testUnknownKindInsideAHandler},
		{"CancelRunningJob", testCancelRunning},
		{"ProgressIsFenced", testProgress},
		{"HandlerReadsMetadata", testMetadata},
		{"HandlerReadsGroup", testGroup},
		{"EnqueueWakesIdlePool", testWake},
		{"ScheduledJobRunsWhenDue", testScheduled},
		{"RetryInBackoffWakesIdlePool", testRetryWakes},
		{"StrictPriorityQueues", testStrictPriority},
		{"WeightedQueues", testWeighted},
		{"PauseAndResume", testPauseResume},
		{"RetentionUpkeep", testRetentionUpkeep},
		{"RetentionByCount", testRetentionByCount},
		{"PeriodicJobsOncePerTick", testPeriodic},
		{"StoredSchedules", testStoredSchedules},
		{"ConfigSchedulesListed", testConfigSchedulesListed},
		{"LimitsHoldAcrossPools", testLimitsAcrossPools},
		{"TraceAcrossRetry", testTraceAcrossRetry},
		{"TraceLeaseLost", testTraceLeaseLost},
		{"TraceCancel", testTraceCancel},
		{"TraceStaleSettlement", testTraceStaleSettlement},
		{"TraceOff", testTraceOff},
		{"WorkerRegistry", testRegistry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, nc)
		})
	}
}
