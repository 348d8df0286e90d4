// Package dashboard is fenceq's web dashboard: server-rendered pages of the
// queues, their jobs and their leases, served by workerd under /ui/.
//
// It reads Redis only through package broker and writes nothing but the
// operator's actions (retry, cancel, release, pause, resume, limits) and
// the sessions of sign-ins (broker.StartSession, ended at sign-out on
// every process), and those only for a user signed in with the admin
// token: without a token the dashboard is read-only. Every page works without JavaScript; a small
// script only refreshes the figures that change. Every page reads a
// bounded amount of Redis, whatever the size of a queue: indexes are read
// by page, and filters examine at most broker.ExamineDefault entries.
//
// What it must never do: change state on a GET, act on a POST that lacks
// the session's CSRF token, write anything a template did not escape,
// answer a Host that is not its listener's or an allowed name (host.go),
// or pass the broker a queue name that is not in the queues set, so that
// no visitor can make the process or Redis keep anything. The one thing
// it keeps per visitor is the sign-in rate limit's allowance (limiter.go),
// for at most signInAddrsMax client addresses.
package dashboard
