package broker

import (
	"fmt"
	"strings"
)

// The fields of a job hash (…{q}:job:<id>). Every name a script or a Go
// reader uses is one of these, named by its constant in Go and as F.<name>
// in the scripts (scriptFields writes that table ahead of lib.lua);
// fields_internal_test.go fails on a name that is not here and on one
// quoted in a script or written as a literal in a hash command.
const (
	fieldKind            = "kind"
	fieldPayload         = "payload"
	fieldState           = "state"
	fieldPriority        = "priority"
	fieldAttempt         = "attempt"
	fieldMaxAttempts     = "max_attempts"
	fieldGen             = "gen"   // lease generation (invariant 3)
	fieldToken           = "token" // the valid claim's token; empty when none
	fieldLeaseUntil      = "lease_until"
	fieldRunAt           = "run_at"
	fieldCreatedAt       = "created_at"
	fieldClaimedAt       = "claimed_at"
	fieldFinishedAt      = "finished_at"
	fieldLastError       = "last_error"
	fieldErrors          = "errors" // JSON list of the attempts' errors
	fieldResult          = "result"
	fieldProgress        = "progress"
	fieldCancel          = "cancel" // "1" when cancel was requested
	fieldRenewals        = "renewals"
	fieldMeta            = "meta"  // the job's Metadata as a JSON object
	fieldGroup           = "group" // the job's Group; absent when it has none
	fieldReq             = "req"   // the request id of the enqueue or claim that wrote it
	fieldSettled         = "settled"
	fieldPrevSettled     = "prev_settled"
	fieldPrevSettled2    = "prev_settled_2"
	fieldPrevSettled3    = "prev_settled_3"
	fieldRetried         = "retried"
	fieldUnhandledSince  = "unhandled_since"
	fieldDependsOn       = "depends_on"
	fieldOnParentFailure = "on_parent_failure"
	fieldBlockedOn       = "blocked_on"
	fieldHasChildren     = "has_children"
	fieldInc             = "inc"
	fieldUniqueUntilDone = "unique_until_done"
	fieldWaitTag         = "wait_tag"
	fieldWaitUntil       = "wait_until"
	fieldWaited          = "waited"
)

// jobFields is the catalogue: every field of a job hash, once.
var jobFields = []string{
	fieldKind, fieldPayload, fieldState, fieldPriority, fieldAttempt, fieldMaxAttempts,
	fieldGen, fieldToken, fieldLeaseUntil, fieldRunAt, fieldCreatedAt, fieldClaimedAt,
	fieldFinishedAt, fieldLastError, fieldErrors, fieldResult, fieldProgress, fieldCancel,
	fieldRenewals, fieldMeta, fieldReq, fieldSettled, fieldPrevSettled, fieldPrevSettled2,
	fieldPrevSettled3, fieldRetried, fieldUnhandledSince, fieldDependsOn, fieldOnParentFailure,
	fieldBlockedOn, fieldHasChildren, fieldInc, fieldUniqueUntilDone, fieldWaitTag,
	fieldWaitUntil, fieldWaited, fieldGroup,
}

// The values of one claimed job in a claim's reply (take.lua), at these
// positions: the job's id, then its fields as the claim left them. The
// order is defined here only: take.lua's claim_reply walks CLAIM_REPLY,
// which scriptFields writes from claimReplyFields, and readClaim reads each
// value at its constant. To add a value: a constant before
// claimReplyWidth, its name in claimReplyFields, the value in both of
// take.lua's claim_reply calls, and its read in readClaim.
const (
	claimReplyID = iota
	claimReplyKind
	claimReplyPayload
	claimReplyAttempt
	claimReplyMaxAttempts
	claimReplyGen
	claimReplyToken
	claimReplyLeaseUntil
	claimReplyMeta  // '' when the job has none
	claimReplyGroup // '' when the job has none
	claimReplyWidth
)

// claimReplyFields names each position of a claimed job's reply: "id",
// then job hash fields.
var claimReplyFields = [claimReplyWidth]string{
	claimReplyID:          "id",
	claimReplyKind:        fieldKind,
	claimReplyPayload:     fieldPayload,
	claimReplyAttempt:     fieldAttempt,
	claimReplyMaxAttempts: fieldMaxAttempts,
	claimReplyGen:         fieldGen,
	claimReplyToken:       fieldToken,
	claimReplyLeaseUntil:  fieldLeaseUntil,
	claimReplyMeta:        fieldMeta,
	claimReplyGroup:       fieldGroup,
}

// scriptFields is the Lua that names the catalogue for the scripts: F maps
// each field to its name, CLAIM_REPLY lists claimReplyFields in order. F is
// a plain table: a FUNCTION library's load step has no setmetatable, so
// fields_internal_test.go checks every F.<name> a script uses instead.
func scriptFields() string {
	var s strings.Builder
	s.WriteString("-- job hash fields and the claim reply, written by broker/fields.go\nlocal F = {")
	for _, f := range jobFields {
		fmt.Fprintf(&s, "%s = '%s', ", f, f)
	}
	s.WriteString("}\nlocal CLAIM_REPLY = {")
	for _, f := range claimReplyFields {
		fmt.Fprintf(&s, "'%s', ", f)
	}
	s.WriteString("}\n")
	return s.String()
}
