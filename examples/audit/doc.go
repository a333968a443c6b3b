// Package audit is an example projection to copy: an audit view of
// credentials and egress from the ledger. It answers which sandbox bound which
// credential for which hosts, and when it was revoked, and how each sandbox's
// egress rules changed over time, in SQLite or Postgres, exactly once through
// projections.SQLHandler. No credential value is ever in the ledger, so none is
// here: only names, hosts and binding types.
//
// It reads credential.bound, credential.revoked, egress.rule_added,
// egress.rule_removed and sandbox.created (for the egress default), the filter
// pushed down to JetStream.
//
// Definition describes the projection for projections.Register; a binary that
// wants it registers it (cmd/projector does). Importing the package registers
// nothing.
//
// Of this module it imports events and projections only.
package audit
