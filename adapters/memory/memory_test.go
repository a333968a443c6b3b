package memory_test

import (
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/memory"
)

func TestConformance(t *testing.T) {
	adaptertest.Run(t, func(t *testing.T) adapters.Store { return memory.New() })
}

func TestProjection(t *testing.T) {
	adaptertest.RunProjection(t, func(t *testing.T) adaptertest.ProjectionStore { return memory.New() })
}
