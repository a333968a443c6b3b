package bus

// Unchained makes l append without the hash chain, for the benchmark that
// measures the chain's cost.
func Unchained(l *Ledger) { l.unchained = true }

// OnReadMessage calls f before each message a read decodes, until the test
// ends.
func OnReadMessage(t interface{ Cleanup(func()) }, f func()) {
	testHookSlot = f
	t.Cleanup(func() { testHookSlot = nil })
}
