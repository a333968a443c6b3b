package alineo

// SetLineOutput makes sb ask execd for its line format instead of exact
// output chunks, as against a server without the extension.
func SetLineOutput(sb *Sandbox, on bool) { sb.lineOutput = on }
