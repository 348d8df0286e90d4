package brokertest

import (
	"testing"
)

// Run runs the whole conformance suite against the backend nb makes.
func Run(t *testing.T, nb NewBackend) {
	tests := []struct {
		name string
		fn   func(*testing.T, NewBackend)
	}{
		{"Lifecycle", testLifecycle},
		{"GenerationStrictlyIncreases", testGenerationStrictlyIncreases},
		{"StaleClaimAfterReleaseUnowned", testStaleAfterReleaseUnowned},
		{"StaleClaimAfterReapAndReclaim", testStaleAfterReap},
		{"StaleClaimAfterDeleteAndReenqueue", testStaleAfterRecreate},
		{"ExpiredButUnreapedLeaseStillHeld", testExpiredButUnreaped},
		{"ReapBoundedAndOutcomes", testReap},
		{"ReleaseDoesNotChargeAttempt", testRelease},
		{"ReleaseUnownedBumpsGenerationInAnyState", testReleaseUnowned},
		{"FailRetryDeadSnooze", testFail},
		{"Cancel", testCancel},
		{"Retry", testRetry},
		{"Pause", testPause},
		{"UniqueJobs", testUnique},
		{"UniqueHolderTerms", testUniqueHolderTerms},
		{"Limits", testLimits},
		{"OverviewClaimable", testOverviewClaimable},
		{"LimitsKeepOtherSettings", testLimitsKeepOtherSettings},
		{"Events", testEvents},
		{"Dependencies", testDependencies},
		{"DependencyEdges", testDependencyEdges},
		{"BoundedCascades", testBoundedCascades},
		{"Retention", testRetention},
		{"PriorityAndFIFO", testPriority},
		{"DelayAndRunAt", testDelay},
		{"DuplicateID", testDuplicate},
		{"EnqueueMany", testEnqueueMany},
		{"BatcherAnswers", testBatcherAnswers},
		{"BatcherConcurrent", testBatcherConcurrent},
		{"BatcherCancel", testBatcherCancel},
		{"BatcherClose", testBatcherClose},
		{"BatcherCloseRace", testBatcherCloseRace},
		{"BatcherBounds", testBatcherBounds},
		{"BatcherLostReply", testBatcherLostReply},
		{"Metadata", testMetadata},
		{"InvalidInput", testInvalid},
		{"CorruptJobHashes", testCorrupt},
		{"ScriptFlush", testScriptFlush},
		{"RenewMany", testRenewMany},
		{"AckMany", testAckMany},
		{"AckClaim", testAckClaim},
		{"FailClaim", testFailClaim},
		{"Wait", testWait},
		{"WaitAfterRetry", testWaitAfterRetry},
		{"WaitAcrossShortRetention", testWaitAcrossShortRetention},
		{"WaitKeepsNothingAfterARetry", testWaitKeepsNothingAfterARetry},
		{"WaitKeepsEachIncarnation", testWaitKeepsEachIncarnation},
		{"WaitReturnsWhenCancelled", testWaitReturnsWhenCancelled},
		{"Inspection", testInspection},
		{"CheckWhileJobsMove", testCheckWhileJobsMove},
		{"WakeToken", testWake},
		{"WaitForWork", testWaitForWork},
		{"LostReplies", testLostReplies},
		{"Model", testModel},
		{"ThroughputCounts", testThroughputCounts},
		{"ThroughputShape", testThroughputShape},
		{"ThroughputWindow", testThroughputWindow},
		{"ThroughputMany", testThroughputMany},
		{"DoneLastMinuteFromStats", testDoneLastMinuteFromStats},
		{"ErrorHistory", testErrorHistory},
		{"Renewals", testRenewals},
		{"HugeGenPoisonsCounter", testHugeGenPoisonsCounter},
		{"GenAboveCounter", testGenAboveCounter},
		{"CorruptBlockedOnAbortsCascade", testCorruptBlockedOnAbortsCascade},
		{"CascadeEntryWrongTypeWedgesQueue", testCascadeEntryWrongTypeWedgesQueue},
		{"CorruptDependsOnAbortsRetry", testCorruptDependsOnAbortsRetry},
		{"ResendAfterReclaim", testResendAfterReclaim},
		{"WaitWakeupLostToCancelledCaller", testWaitWakeupLostToCancelledCaller},
		{"LimitsLostUpdate", testLimitsLostUpdate},
		{"ResentClaimOverstatesLocalDeadline", testResentClaimOverstatesLocalDeadline},
		{"ResendAfterUnsettledReclaim", testResendAfterUnsettledReclaim},
		{"ResendAfterOperatorRetry", testResendAfterOperatorRetry},
		{"CorruptMetaPassesLuaFailsGo", testCorruptMetaPassesLuaFailsGo},
		{"WorkerResendAfterFusedClaimTookItsOwnJob", testWorkerResendAfterFusedClaimTookItsOwnJob},
		{"ResendClaimThatTookItsOwnJob", testResendClaimThatTookItsOwnJob},
		{"PrettyMetaIsHandedOut", testPrettyMetaIsHandedOut},
		{"FusedResendAfterLeaseExpired", testFusedResendAfterLeaseExpired},
		{"WorkerResendAfterReaskTookItsOwnJob", testWorkerResendAfterReaskTookItsOwnJob},
		{"UsedRequestIDSettlesItsOwnLease", testUsedRequestIDSettlesItsOwnLease},
		{"ResendAfterThreeLaterClaims", testResendAfterThreeLaterClaims},
		{"JobPageReadsWhatAListingShows", testJobPageReadsWhatAListingShows},
		{"LeasesListEveryLeaseHeldThroughout", testLeasesListEveryLeaseHeldThroughout},
		{"JobsListsEveryJobThatStayed", testJobsListsEveryJobThatStayed},
		{"RetryDeadEndsPastCorruptEntry", testRetryDeadEndsPastCorruptEntry},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, nb)
		})
	}
}
