package projectorcmd_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/projections/projectorcmd"
	"github.com/alineo-labs/alineo/testenv"
)

// TestRefusesNothing (issue 40 item 5): rebuild and verify need an explicit
// source and create nothing without one; a stream without entries, or none
// from --from on, ends them with ErrEmptyStream (exit 1), not a report of
// 0 entries; verify needs a target that exists.
func TestRefusesNothing(t *testing.T) {
	ctx := context.Background()
	cwd := t.TempDir()
	t.Chdir(cwd)
	for _, cmd := range []string{"rebuild", "verify", "partitions"} {
		err := run(ctx, []string{cmd}, noenv, &testutil.SyncBuffer{})
		var ue *usage.Error
		if !errors.Is(err, projectorcmd.ErrNoSource) || !errors.As(err, &ue) {
			t.Errorf("%s without a source = %v, want a usage error wrapping ErrNoSource", cmd, err)
		}
		err = run(ctx, []string{cmd, "--nats-dir", filepath.Join(cwd, "nowhere")}, noenv, &testutil.SyncBuffer{})
		if !errors.Is(err, projectorcmd.ErrNoSource) {
			t.Errorf("%s --nats-dir of no store = %v, want ErrNoSource", cmd, err)
		}
	}
	if left, _ := os.ReadDir(cwd); len(left) > 0 {
		t.Errorf("the refused commands left %v in the working directory", left)
	}

	empty := testenv.NATS(t)
	db := filepath.Join(cwd, "target.db")
	for _, args := range [][]string{
		{"rebuild", "--nats", empty, "--sqlite", db},
		{"rebuild", "--projection", "execstats", "--nats", empty, "--sqlite", db},
	} {
		err := run(ctx, args, noenv, &testutil.SyncBuffer{})
		if !errors.Is(err, projectorcmd.ErrEmptyStream) || usage.Code(err) != 1 {
			t.Errorf("run(%q) on an empty stream = %v (exit %d), want ErrEmptyStream, exit 1", args, err, usage.Code(err))
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a rebuild of an empty stream created its target: %v", err)
	}
	err := run(ctx, []string{"verify", "--nats", empty, "--sqlite", db}, noenv, &testutil.SyncBuffer{})
	if !errors.Is(err, projectorcmd.ErrNoTarget) {
		t.Errorf("verify of a missing database = %v, want ErrNoTarget", err)
	}
	if err := os.WriteFile(db, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := run(ctx, []string{"verify", "--nats", empty, "--sqlite", db}, noenv, &testutil.SyncBuffer{}); !errors.Is(err, projectorcmd.ErrEmptyStream) {
		t.Errorf("verify of an empty stream = %v, want ErrEmptyStream", err)
	}
	full := testenv.NATS(t)
	publish(t, full, "sbf", 1)
	if err := run(ctx, []string{"rebuild", "--nats", full, "--sqlite", db, "--from", "100"}, noenv, &testutil.SyncBuffer{}); !errors.Is(err, projectorcmd.ErrEmptyStream) {
		t.Errorf("rebuild --from past the end = %v, want ErrEmptyStream", err)
	}
}

// TestStoreDirSource: the --nats-dir of an embedded server's store is a
// source: rebuild reads it when no server holds it, and says how to reach
// the server that does.
func TestStoreDirSource(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "nats")
	b, err := bus.Open(ctx, bus.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	publish(t, b.LocalURL(), "sbd", 2)
	db := filepath.Join(t.TempDir(), "rebuilt.db")
	err = run(ctx, []string{"rebuild", "--nats-dir", dir, "--sqlite", db}, noenv, &testutil.SyncBuffer{})
	if !errors.Is(err, bus.ErrStoreInUse) || !strings.Contains(err.Error(), "NATS_URL=$(cat "+filepath.Join(dir, "nats.url")+")") {
		t.Errorf("rebuild of a held store = %v, want ErrStoreInUse saying where its URL is", err)
	}
	b.Close()
	out := &testutil.SyncBuffer{}
	if err := run(ctx, []string{"rebuild", "--nats-dir", dir, "--sqlite", db}, noenv, out); err != nil {
		t.Fatalf("rebuild --nats-dir: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), ": 5 entries") {
		t.Errorf("rebuild output = %q, want 5 entries", out)
	}
}

// TestPartitionsCommand: partitions prints each partition's offset in the
// target, the lag of its consumer and the projector that holds it.
func TestPartitionsCommand(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	for _, id := range []string{"sa", "sb", "sc", "sd"} {
		publish(t, url, id, 1)
	}
	db := filepath.Join(t.TempDir(), "stats.db")
	common := []string{"--projection", "execstats", "--partitions", "2", "--nats", url, "--sqlite", db}
	if err := run(ctx, append([]string{"rebuild"}, common...), noenv, &testutil.SyncBuffer{}); err != nil {
		t.Fatal(err)
	}
	out := &testutil.SyncBuffer{}
	if err := run(ctx, append([]string{"partitions"}, common...), noenv, out); err != nil {
		t.Fatalf("partitions: %v\n%s", err, out)
	}
	row := regexp.MustCompile(`(?m)^([01]) +(execstats-p[01]-of-2) +([0-9]+) +(\S+) +(\S+)$`)
	rows := row.FindAllStringSubmatch(out.String(), -1)
	if len(rows) != 2 || !strings.Contains(out.String(), "2 partition(s)") {
		t.Fatalf("partitions printed %q, want a row for each of 2 partitions", out)
	}
	for _, r := range rows {
		if r[3] == "0" || r[4] != "-" || r[5] != "-" {
			t.Errorf("partition row %q: want an offset, no consumer (lag -) and no holder", r[0])
		}
	}
	// A projector on partition 1 holds it, caught up.
	p := testutil.Start(t, run, append([]string{"run", "--partition", "1", "--metrics", "", "--progress", "0"}, common...), noenv)
	testenv.Eventually(t, 20*time.Second, func() error {
		out := &testutil.SyncBuffer{}
		if err := run(ctx, append([]string{"partitions"}, common...), noenv, out); err != nil {
			return err
		}
		rows := row.FindAllStringSubmatch(out.String(), -1)
		if len(rows) != 2 || rows[1][4] != "0" || !strings.Contains(rows[1][5], "/"+strconv.Itoa(os.Getpid())+"/") || rows[0][5] != "-" {
			return errors.New("partition 1 not yet held by this process with lag 0:\n" + out.String())
		}
		return nil
	})
	if err := p.Stop(t, 10*time.Second); err != nil {
		t.Fatal(err)
	}
}
