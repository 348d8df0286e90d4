// Package exec is the adapter that handles jobs by running a command, so a
// queue can be served without Go code: workerd's exec handlers are built
// with it.
//
//	h, err := exec.New(exec.Config{Command: []string{"./send-email"}, PermanentExitCodes: []int{65}})
//	…
//	mux.Handle("send_email", h)
//
// It lives apart from package handlers so that what a user writes against
// does not import os/exec and syscall, and so that process groups, signals
// and pipes stay in one place. It builds on Unix only: it needs process
// groups to stop everything a command started.
package exec
