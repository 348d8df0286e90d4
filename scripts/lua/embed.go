// Package lua embeds fenceq's Redis scripts. It is not an API: only the
// broker and fence packages import it (scripts/lua/layering_test.go checks
// that), and what it holds changes with them.
//
// The files:
//   - lib.lua, the helpers every broker script shares; the broker prefixes
//     each operation with its key names and lib.lua at load time.
//   - take.lua, a piece: the claim, run by claim.lua, ack.lua and fail.lua.
//   - one file per atomic operation of the broker package: enqueue, claim,
//     renew, progress, ack, fail, release, release_unowned, reap, cancel,
//     retry, delete, purge, promote, trim, wait, leases, range, browse,
//     overview, throughput, check_one, check_groups, limits, glimits (the
//     group limits) and groups.
//   - fence_hset.lua, the fence package's standalone script.
package lua

import "embed"

// FS holds every script; lib.lua and take.lua are pieces, not operations.
//
//go:embed *.lua
var FS embed.FS
