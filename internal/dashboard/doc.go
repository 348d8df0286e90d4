// Package dashboard is fenceq's web dashboard: server-rendered pages of the
// queues, their jobs and their leases, served by workerd under /ui/.
//
// It reads Redis only through package broker and writes nothing but the
// operator's actions (retry, cancel, release, pause, resume, limits), and
// those only for a user signed in with the admin token: without a token
// the dashboard is read-only. Every page works without JavaScript; a small
// script only refreshes the figures that change. Every page reads a
// bounded amount of Redis, whatever the size of a queue: indexes are read
// by page, and filters examine at most broker.ExamineDefault entries.
//
// What it must never do: change state on a GET, act on a POST that lacks
// the session's CSRF token, or write anything a template did not escape.
package dashboard
