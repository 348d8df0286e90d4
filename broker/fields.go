package broker

import (
	"fmt"
	"strings"
)

// The fields of a job hash (…{q}:job:<id>). Every name a script or a Go
// reader uses is one of these; fields_internal_test.go scans the scripts
// and fails on a name that is not here. The scripts reach the same names
// as F.<name> (scriptFields writes that table ahead of lib.lua).
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
	fieldMeta            = "meta" // the job's Metadata as a JSON object
	fieldReq             = "req"  // the request id of the enqueue or claim that wrote it
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
	fieldWaitUntil, fieldWaited,
}

// scriptFields is the Lua that names the catalogue for the scripts: F maps
// each field to its name. It is a plain table: a FUNCTION library's load
// step has no setmetatable, so fields_internal_test.go checks every F.<name>
// a script uses instead.
func scriptFields() string {
	var s strings.Builder
	s.WriteString("-- job hash fields, written by broker/fields.go\nlocal F = {")
	for _, f := range jobFields {
		fmt.Fprintf(&s, "%s = '%s', ", f, f)
	}
	s.WriteString("}\n")
	return s.String()
}
