package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/testenv"
)

// TestInstalledWithInit: sandboxd installed with sandboxd-init next to it
// (as `go install ./cmd/...` leaves them) binds sandboxd-init into its
// sandboxes, and says so; alone, it binds itself.
func TestInstalledWithInit(t *testing.T) {
	if os.Geteuid() != 0 {
		testenv.SkipOrFail(t, "sandboxd needs root")
	}
	if _, err := exec.LookPath("runc"); err != nil {
		testenv.SkipOrFail(t, "no runc (make deps installs it)")
	}
	dir := t.TempDir()
	build := func(out, pkg string) string {
		p := filepath.Join(dir, out)
		if err := testutil.BuildStatic(p, pkg); err != nil {
			t.Fatal(err)
		}
		if resolved, err := filepath.EvalSymlinks(p); err == nil {
			p = resolved // as sandboxd names its own executable
		}
		return p
	}
	bin := build("sandboxd", ".")
	// The init it says it binds, run with and then without sandboxd-init.
	initOf := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "--listen", "127.0.0.1:0", "--data", t.TempDir())
		out := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			_ = cmd.Process.Signal(os.Interrupt)
			_ = cmd.Wait()
		}()
		re := regexp.MustCompile(`msg="sandboxd: the sandbox init" init=(\S+)`)
		var init string
		testenv.Eventually(t, 30*time.Second, func() error {
			m := re.FindStringSubmatch(out.String())
			if m == nil {
				return fmt.Errorf("no init in the log yet:\n%s", out)
			}
			init = m[1]
			return nil
		})
		return init
	}
	if got := initOf(); got != bin {
		t.Errorf("alone, sandboxd binds %s; want itself, %s", got, bin)
	}
	sibling := build("sandboxd-init", "../sandboxd-init")
	if got := initOf(); got != sibling {
		t.Errorf("with sandboxd-init next to it, sandboxd binds %s; want %s", got, sibling)
	}
}
