// Package lua holds fenceq's Redis scripts: one file per atomic operation
// of the broker package, each prefixed at load time with the helpers of
// lib.lua (and take.lua, the claim, for the operations that claim), and
// fence_hset.lua, the fence package's standalone script.
package lua

import "embed"

// FS holds every script; lib.lua and take.lua are pieces, not operations.
//
//go:embed *.lua
var FS embed.FS
