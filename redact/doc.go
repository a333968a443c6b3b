// Package redact replaces known secret values in text and in byte streams with
// a marker naming the secret, "[REDACTED:<name>]", before anything is written to
// the ledger, a stream or a table.
//
// A Redactor is built once from the bound values (name → value) and is safe for
// concurrent use. A Stream redacts a byte stream chunk by chunk: a secret split
// across chunk boundaries is still replaced, because the stream holds back the
// last len(longest secret)-1 bytes until it has seen enough to decide. The output
// of a Stream does not depend on how its input was chunked: it always equals
// Redactor.Bytes of the whole input.
//
// Matching is leftmost, then longest: at each position the longest secret that
// starts there is replaced and scanning resumes after it. Empty values are
// ignored.
//
// Of this module it imports nothing: only the standard library; the SDK (root
// package), sandboxd and the egress proxy all import it, so it must not import
// any of them.
package redact
