// Package lua holds fenceq's Redis scripts: one file per atomic operation,
// each prefixed at load time with the helpers of lib.lua. The broker package
// is their only user.
package lua

import "embed"

// FS holds every script; lib.lua is the shared prelude, not an operation.
//
//go:embed *.lua
var FS embed.FS
