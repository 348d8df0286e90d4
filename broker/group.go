package broker

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxGroupBytes bounds Job.Group. A group names a tenant, a customer or
// an API key; it is stored in the job hash and handed back by every claim.
const MaxGroupBytes = 128

// ValidateGroup answers the *ValidationError Enqueue would for a job of
// group: at most MaxGroupBytes of valid UTF-8, no control characters, and
// no white space at either end. "" is valid: the job has no group.
func ValidateGroup(group string) error {
	if group == "" {
		return nil
	}
	const what = "a group names a tenant or key: use its plain name"
	switch {
	case len(group) > MaxGroupBytes:
		return &ValidationError{Field: "group", Value: short(group),
			Reason: fmt.Sprintf("is %d bytes; at most %d are allowed (MaxGroupBytes): name the group by a short id, not by its data", len(group), MaxGroupBytes)}
	case !utf8.ValidString(group):
		return &ValidationError{Field: "group", Value: short(group), Reason: "is not valid UTF-8; " + what}
	case strings.ContainsFunc(group, unicode.IsControl):
		return &ValidationError{Field: "group", Value: short(group), Reason: "must not contain control characters; " + what}
	}
	first, _ := utf8.DecodeRuneInString(group)
	last, _ := utf8.DecodeLastRuneInString(group)
	if unicode.IsSpace(first) || unicode.IsSpace(last) {
		return &ValidationError{Field: "group", Value: group, Reason: "must not begin or end with white space (trim it): \"acme\" and \" acme\" would be two groups"}
	}
	return nil
}
