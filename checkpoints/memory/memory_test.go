package memory_test

import (
	"testing"

	"github.com/alineo-labs/alineo/checkpoints"
	"github.com/alineo-labs/alineo/checkpoints/checkpointtest"
	"github.com/alineo-labs/alineo/checkpoints/memory"
)

func TestConformance(t *testing.T) {
	checkpointtest.Run(t, func(t *testing.T, opts checkpoints.Options) checkpoints.Store {
		return memory.New(opts)
	})
}

func TestShared(t *testing.T) {
	checkpointtest.RunShared(t, func(t *testing.T, opts checkpoints.Options) (checkpoints.Store, checkpoints.Store) {
		s := memory.New(opts)
		return s, s
	})
}
