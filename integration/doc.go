// Package integration runs fenceq's behaviours against real Redis servers:
// the same conformance suites as the unit tests (which use miniredis), plus
// what miniredis cannot show. It holds tests only.
//
// The server is FENCEQ_REDIS_ADDR, default 127.0.0.1:6379. Tests isolate
// themselves by key prefix, so the server may be shared. When it cannot be
// reached the tests skip, loudly; under CI=true they fail instead.
package integration
