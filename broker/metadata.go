package broker

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"
)

// MaxMetadataBytes bounds Job.Metadata: the sum of len(key)+len(value)
// over its entries but the W3C trace context's, which are bounded apart
// (traceparent at most 55 bytes, its version-00 form; tracestate at most
// 512, the size W3C asks every system to carry), so that tracing, which
// writes them, never refuses a job that was accepted without it. Every
// claim carries the metadata back, so it must stay small; large data
// belongs in the payload.
const MaxMetadataBytes = 4096

// The trace context's own bounds (MaxMetadataBytes).
const (
	traceparentMaxBytes = 55
	tracestateMaxBytes  = 512
)

// validMetadata checks Job.Metadata against MaxMetadataBytes and for keys
// and values that survive the JSON form the hash stores.
func validMetadata(m map[string]string) error {
	size := 0
	// Sorted, so that of several bad entries the same one is named each time.
	for _, k := range slices.Sorted(maps.Keys(m)) {
		v := m[k]
		switch {
		case k == "":
			return &ValidationError{Field: "metadata", Reason: "has an empty key; name every entry"}
		case !utf8.ValidString(k):
			return &ValidationError{Field: "metadata", Value: short(k), Reason: "key is not valid UTF-8; metadata holds text (put binary data in the payload)"}
		case !utf8.ValidString(v):
			return &ValidationError{Field: "metadata", Value: short(k), Reason: "value of this key is not valid UTF-8; metadata holds text (put binary data in the payload)"}
		case k == "traceparent" && len(v) > traceparentMaxBytes:
			return &ValidationError{Field: "metadata", Value: short(v), Reason: fmt.Sprintf("traceparent is %d bytes; a W3C traceparent (version 00) is %d", len(v), traceparentMaxBytes)}
		case k == "tracestate" && len(v) > tracestateMaxBytes:
			return &ValidationError{Field: "metadata", Value: short(v), Reason: fmt.Sprintf("tracestate is %d bytes; at most %d are carried (W3C trace context)", len(v), tracestateMaxBytes)}
		case k == "traceparent" || k == "tracestate":
			continue // bounded apart from the rest
		}
		size += len(k) + len(v)
	}
	if size > MaxMetadataBytes {
		return &ValidationError{Field: "metadata", Value: fmt.Sprintf("%d bytes", size),
			Reason: fmt.Sprintf("keys and values add up to more than the limit of %d bytes (MaxMetadataBytes); metadata is for small headers, put large data in the payload", MaxMetadataBytes)}
	}
	return nil
}

// encodeMetadata is the job hash's meta field for m: "" (no field) when m
// is empty, so a job without metadata stores what it always has.
func encodeMetadata(m map[string]string) string {
	if len(m) == 0 {
		return ""
	}
	b, _ := json.Marshal(m) // a map of valid strings always encodes
	return string(b)
}

// decodeMetadata reads a meta field: nil when there is none. A field that
// is not a JSON object of strings is an error, for the caller to say whose.
func decodeMetadata(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	var m map[string]string
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		return nil, err
	}
	if m == nil { // the JSON text null
		return nil, fmt.Errorf("meta is null, not an object")
	}
	return m, nil
}
