// Command projector keeps read models: it consumes the ledger stream
// (ALINEO_LEDGER) as a durable JetStream consumer and applies it to a
// registered projection in SQLite or Postgres (the product's tables by
// default, or one of the example projections execstats and audit), with
// Prometheus metrics. It is projections/projectorcmd over those projections;
// a binary of your own runs yours the same way (see that package).
//
//	projector [run]      [flags]  follow the stream (default)
//	projector rebuild    [flags]  project the history into the target and exit
//	projector verify     [flags]  rebuild into memory and compare with the target
//	projector partitions [flags]  each partition's offset, lag and holder
//	projector list                print the registered projections
package main

import (
	"github.com/alineo-labs/alineo/examples/audit"
	"github.com/alineo-labs/alineo/examples/execstats"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectorcmd"
)

// The projections this binary runs beside the product's tables (which
// package projections registers): the two examples. The binary that wants a
// projection registers it; importing a projection's package registers
// nothing.
func init() {
	projections.Register(execstats.Definition())
	projections.Register(audit.Definition())
}

func main() { projectorcmd.Main() }
