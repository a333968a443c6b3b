// Package bustest is the conformance suite for the bus ledger: ordering,
// fencing, message-id dedupe, the barrier, subscriptions from a sequence, and
// the read-model fallback when retention removed history. Every bus setup
// (embedded server, cluster, external server) runs it:
//
//	bustest.Run(t, func(t *testing.T, cfg bus.Config) *bus.Bus { … })
//
// Of this module it imports adapters, bus, events and testenv only, and
// otherwise the standard library's testing packages.
package bustest
