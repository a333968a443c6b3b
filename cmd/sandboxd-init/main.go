// Command sandboxd-init is the program sandboxd runs inside every sandbox
// (package sandboxinit). Installed next to sandboxd (`CGO_ENABLED=0 go
// install ./cmd/...` puts both in one directory), it is bound into sandboxes
// in place of sandboxd's own executable, which links far more and so starts
// slower. sandboxd checks that it is of the same build, and otherwise uses
// itself. It must be statically linked (CGO_ENABLED=0, as the Makefile
// builds it) to run in any image.
package main

import "github.com/alineo-labs/alineo/sandboxd/sandboxinit"

func main() { sandboxinit.Main() }
