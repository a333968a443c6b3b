// Package validated carries ledger entries that already passed
// events.Validate from where they entered the module (the SDK's ledger
// writer, the projector's decoder) to the store or bus ledger that keeps them,
// so that no entry is validated twice.
//
// The proof is the type: Entries can only be made in this module (the
// package is internal), by Check, which validates, or by Trust, for a caller
// that validated each entry itself. A store's AppendValidated or
// ApplyValidated takes Entries and does not validate again; its Append,
// AppendBatch and ApplyBatch, open to entries from anywhere, still do. Code
// outside the module cannot build a non-empty Entries, so it cannot skip
// validation.
//
// Of this module it imports events only, and otherwise the standard library.
package validated
