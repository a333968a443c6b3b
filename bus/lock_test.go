//go:build unix

package bus_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/bus"
)

// holdEnv makes TestStoreLockHolder, run as a child process, hold a store.
const holdEnv = "ALINEO_TEST_HOLD_NATS_DIR"

// TestStoreLockHolder is not a test: run by TestStoreOneOwner in a child
// process, it opens the embedded server on the store named by holdEnv, says
// "held" and keeps it until its stdin closes.
func TestStoreLockHolder(t *testing.T) {
	dir := os.Getenv(holdEnv)
	if dir == "" {
		t.Skip("the child process of TestStoreOneOwner")
	}
	b, err := bus.Open(context.Background(), bus.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	fmt.Println("held")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
}

// TestStoreOneOwner is issue 40 item 4: a second embedded server on a store
// directory a running one holds fails at once, naming the process that holds
// it and where its URL is; the URL there reaches the running server; once
// the holder is gone, however it ended, the store opens again.
func TestStoreOneOwner(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()

	// Another process holds the store.
	cmd := exec.Command(os.Args[0], "-test.run=^TestStoreLockHolder$")
	cmd.Env = append(os.Environ(), holdEnv+"="+dir)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "held\n" {
		t.Fatalf("holder said %q, %v", line, err)
	}

	_, err = bus.Open(ctx, bus.Config{StoreDir: dir})
	var inUse *bus.StoreInUseError
	if !errors.As(err, &inUse) || !errors.Is(err, bus.ErrStoreInUse) {
		t.Fatalf("Open on a held store = %v, want a *StoreInUseError", err)
	}
	urlFile := filepath.Join(dir, "nats.url")
	if inUse.PID != cmd.Process.Pid || inUse.URLFile != urlFile {
		t.Errorf("error = %+v, want pid %d and URL file %s", inUse, cmd.Process.Pid, urlFile)
	}
	for _, want := range []string{fmt.Sprintf("process %d", cmd.Process.Pid), "NATS_URL=$(cat " + urlFile + ")"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// What the error says works: the URL in the file reaches the holder's server.
	url, err := os.ReadFile(urlFile)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bus.Open(ctx, bus.Config{URL: strings.TrimSpace(string(url))})
	if err != nil {
		t.Fatalf("connect with the URL of %s: %v", urlFile, err)
	}
	b.Close()

	// Killed, the holder leaves no lock behind.
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	b, err = bus.Open(ctx, bus.Config{StoreDir: dir})
	if err != nil {
		t.Fatalf("Open after the holder died: %v", err)
	}

	// In one process, too, a second server on the store is refused, and a
	// closed one gives the store up.
	_, err = bus.Open(ctx, bus.Config{StoreDir: dir})
	if !errors.As(err, &inUse) || inUse.PID != os.Getpid() {
		t.Fatalf("second Open in this process = %v, want a *StoreInUseError naming pid %d", err, os.Getpid())
	}
	b.Close()
	b, err = bus.Open(ctx, bus.Config{StoreDir: dir})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	b.Close()
	_ = stdin.Close()
}
