// Package groupcommit lets concurrent appends share one transaction, so that
// many sessions appending at once pay one commit (one fsync, one round trip)
// between them instead of one each.
//
// A Committer runs the commits of one store. An append that finds no commit
// running commits alone, in its own goroutine, at once: it pays nothing for
// the grouping. Appends that arrive while commits run wait in a queue; when
// one ends, a writer goroutine (a worker of internal/workers, whose stack
// the last batch grew) takes everything queued, up to a bound, into the
// next commit. So a batch is formed while a commit is in flight, and an
// append never waits for one that arrived after it: it is in the first
// commit that starts after it was queued.
//
// A batch is all or nothing for the store; when its commit fails, its
// appends are committed again one by one, so that each gets its own result:
// an append's error reaches only its own caller.
//
// Of this module it imports internal/workers only.
package groupcommit
