package sandboxd_test

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/alineo-labs/alineo/sandboxd"
)

// serverEnv makes the test binary a bare sandboxd on the data directory it
// names, printing its URL: the crash test kills it.
const serverEnv = "ALINEO_SANDBOXD_TEST_SERVER"

func TestMain(m *testing.M) {
	if dir := os.Getenv(serverEnv); dir != "" {
		s, err := sandboxd.Open(context.Background(), sandboxd.Config{DataDir: dir})
		if err == nil {
			var url string
			url, err = s.Start(context.Background())
			fmt.Println(url)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		select {}
	}
	os.Exit(m.Run())
}
