package snapshots_test

import (
	"os"
	"testing"

	"github.com/alineo-labs/alineo/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopPostgres()
	os.Exit(code)
}
