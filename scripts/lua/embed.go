// Package lua holds fenceq's Redis scripts: one file per atomic operation
// of the broker package, each prefixed at load time with the helpers of
// lib.lua, and fence_hset.lua, the fence package's standalone script.
package lua

import "embed"

// FS holds every script; lib.lua is the shared prelude, not an operation.
//
//go:embed *.lua
var FS embed.FS
