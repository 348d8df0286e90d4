// Package jobrow holds [Row]: the fields a job carries wherever it is
// seen, defined once.
//
// A job is seen in four places. Each is a Row plus what that place adds:
//
//   - broker.Lease, one claim of the job: the claim's token and deadlines.
//   - broker.JobInfo, the job as an Inspector reads it: its state,
//     priority, times, errors, result and progress.
//   - handlers.JobSpec, what the worker hands to handlers.NewJob: the
//     Lease's Row and how Progress reaches Redis.
//   - handlers.Job, the job a handler runs: the JobSpec's Row with a
//     Metadata map of its own.
//
// Each embeds Row, so lease.Queue, info.Attempt and job.Generation read
// as fields of their own. A composite literal names the Row:
//
//	lease := broker.Lease{Row: jobrow.Row{Queue: "mail", ID: "j-1", Kind: "send"}}
//	job := handlers.NewJob(handlers.JobSpec{Row: lease.Row})
//
// A Row is plain data with no methods. Copying one shares its Payload and
// Metadata; the type that hands a Row out says whether they are its own.
//
// broker.Job, a job as it is enqueued, does not embed Row: it has no
// attempt or generation yet. Its other fields have a Row field's name and
// type, and a test in internal/structure holds them to it.
//
// jobrow imports only the standard library, so handlers uses it without
// importing broker. internal/structure's tests check both, and that none
// of the four declares a field of Row again.
//
// # Adding a field to a job
//
// A field that all four views carry goes into Row; one that only some
// carry goes into those types. The field's hash name, the scripts that
// read and write it and the Go readers of their replies come with it:
// docs/architecture.md, "Adding a field to a job", lists each step.
package jobrow
