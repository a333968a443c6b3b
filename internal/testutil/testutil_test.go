package testutil_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/testenv"
)

func TestSyncBufferConcurrentWrites(t *testing.T) {
	var b testutil.SyncBuffer
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 100 {
				fmt.Fprint(&b, "x")
			}
		})
	}
	wg.Wait()
	if got, want := len(b.String()), 800; got != want {
		t.Fatalf("len = %d, want %d", got, want)
	}
}

func TestFreePortsDistinct(t *testing.T) {
	ports, err := testutil.FreePorts(5)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports = %v, want 5 distinct ports", ports)
		}
		seen[p] = true
	}
}

var errStopped = errors.New("stopped")

// serve is a run function: it prints a line, then waits for ctx.
func serve(ctx context.Context, args []string, getenv func(string) string, out io.Writer) error {
	fmt.Fprintf(out, "listening on http://%s/ as %s\n", args[0], getenv("WHO"))
	<-ctx.Done()
	return errStopped
}

func TestStartMatchStop(t *testing.T) {
	r := testutil.Start(t, serve, []string{"127.0.0.1:1"}, func(k string) string { return map[string]string{"WHO": "me"}[k] })
	re := regexp.MustCompile(`listening on (http://\S+) as (\w+)`)
	var m []string
	testenv.Eventually(t, 5*time.Second, func() (err error) {
		m, err = r.Match(re)
		return err
	})
	if got, want := m[1]+" "+m[2], "http://127.0.0.1:1/ me"; got != want {
		t.Errorf("match = %q, want %q", got, want)
	}
	if err := r.Stop(t, 5*time.Second); !errors.Is(err, errStopped) {
		t.Errorf("Stop = %v, want the run's error", err)
	}
	if err := r.Stop(t, 5*time.Second); !errors.Is(err, errStopped) {
		t.Errorf("second Stop = %v, want the run's error again", err)
	}
}

func TestMatchQuotesOutput(t *testing.T) {
	r := testutil.Start(t, func(ctx context.Context, _ []string, _ func(string) string, out io.Writer) error {
		fmt.Fprint(out, "starting")
		<-ctx.Done()
		return nil
	}, nil, nil)
	testenv.Eventually(t, 5*time.Second, func() error {
		_, err := r.Match(regexp.MustCompile(`listening`))
		if err == nil || !strings.Contains(err.Error(), `"starting"`) {
			return fmt.Errorf("Match = %v, want an error quoting the output", err)
		}
		return nil
	})
}

func TestFindTool(t *testing.T) {
	dir := t.TempDir()
	tool := filepath.Join(dir, "alineo-fake-tool")
	if err := os.WriteFile(tool, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	if got, err := testutil.FindTool("alineo-fake-tool"); err != nil || got != tool {
		t.Errorf("FindTool on PATH = %q, %v; want %q", got, err, tool)
	}
	if got, err := testutil.FindTool("alineo-no-such-tool"); err == nil {
		t.Errorf("FindTool of a missing tool = %q, want an error", got)
	}
}
