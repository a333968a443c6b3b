// Package summary folds ledger entries into the sandbox-details summary that the
// SQL stores keep beside the events (alineo_sandbox_details). It holds the one
// definition of how an entry changes a session's details, so that every store
// derives the same row from the same entries, and the one WHERE/ORDER/LIMIT
// clause the details lists are read with (Query), whatever the placeholder syntax.
//
// Of this module it imports adapters and events only, and otherwise the
// standard library.
package summary
