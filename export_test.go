package alineo

import "testing"

// SetLineOutput makes sb ask execd for its line format instead of exact
// output chunks, as against a server without the extension.
func SetLineOutput(sb *Sandbox, on bool) { sb.lineOutput = on }

// FakeServerURL starts the fake OpenSandbox server (sandboxes, and an execd
// per sandbox answering by defaultScript) for tb and returns its URL.
func FakeServerURL(tb testing.TB) string { return newFakeServer(tb).URL }
