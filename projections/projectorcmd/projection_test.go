package projectorcmd_test

import (
	"context"
	"database/sql"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/internal/testutil"
	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/testenv"
)

// A registered projection other than the tables runs, rebuilds and verifies by name.
func TestProjectionByName(t *testing.T) {
	url := testenv.NATS(t)
	publish(t, url, "sbx", 4)
	db := filepath.Join(t.TempDir(), "stats.db")
	r := testutil.Start(t, run, []string{"--projection", "execstats", "--nats", url, "--sqlite", db, "--metrics", "", "--progress", "0"}, noenv)
	testenv.Eventually(t, 10*time.Second, func() error {
		var n int
		conn, err := sql.Open("sqlite", db)
		if err != nil {
			return err
		}
		defer conn.Close()
		if err := conn.QueryRow(`SELECT count(*) FROM execstats_execs`).Scan(&n); err != nil {
			return err
		}
		if n != 4 {
			return errors.New("not yet 4 execs")
		}
		return nil
	})
	if err := r.Stop(t, 30*time.Second); err != nil {
		t.Fatalf("run: %v\n%s", err, r.Out)
	}
	if !strings.Contains(r.Out.String(), "projector execstats (execstats)") {
		t.Errorf("output = %q", r.Out)
	}
	vout := &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"verify", "--projection", "execstats", "--nats", url, "--sqlite", db}, noenv, vout); err != nil {
		t.Fatalf("verify: %v\n%s", err, vout)
	}
	if !strings.Contains(vout.String(), "verified sqlite") || strings.Contains(vout.String(), "note:") {
		t.Errorf("verify output = %q, want verified without lag", vout)
	}
	// --consumer is honoured: a consumer that never ran is at offset 0, behind.
	vout = &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"verify", "--projection", "execstats", "--consumer", "nobody", "--nats", url, "--sqlite", db}, noenv, vout); err != nil {
		t.Fatalf("verify: %v", err)
	}
	if !strings.Contains(vout.String(), "(nobody) is at offset 0") {
		t.Errorf("verify --consumer output = %q", vout)
	}
	// A rebuild into another file, partitioned in two, then verified.
	other := filepath.Join(t.TempDir(), "other.db")
	rout := &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"rebuild", "--projection", "execstats", "--partitions", "2", "--nats", url, "--sqlite", other}, noenv, rout); err != nil {
		t.Fatalf("rebuild: %v\n%s", err, rout)
	}
	// 9 entries: sandbox.created, and 4 execs started and completed.
	if !strings.Contains(rout.String(), "ETA") || !strings.Contains(rout.String(), "(execstats): 9 entries") {
		t.Errorf("rebuild output = %q", rout)
	}
	conn, err := sql.Open("sqlite", other)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var keys int
	if err := conn.QueryRow(`SELECT count(*) FROM execstats_offsets WHERE key LIKE 'execstats-p%-of-2'`).Scan(&keys); err != nil || keys != 2 {
		t.Fatalf("partition offsets = %d, %v; want 2", keys, err)
	}
	vout = &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"verify", "--projection", "execstats", "--partitions", "2", "--nats", url, "--sqlite", other}, noenv, vout); err != nil {
		t.Fatalf("verify partitions: %v\n%s", err, vout)
	}
	if strings.Contains(vout.String(), "note:") {
		t.Errorf("verify output = %q: the partition offsets were not found", vout)
	}
}

func TestProjectionFlagsErrors(t *testing.T) {
	for _, args := range [][]string{
		{"--projection", "nope"},
		{"--partitions", "2", "--partition", "2"},
		{"--partitions", "0"},
	} {
		err := run(context.Background(), append(args, "--nats", testenv.NATS(t), "--sqlite", filepath.Join(t.TempDir(), "x.db")), noenv, io.Discard)
		var ue *usage.Error
		if !errors.As(err, &ue) {
			t.Errorf("run(%q) = %v, want a usage error", args, err)
		}
	}
	out := &testutil.SyncBuffer{}
	if err := run(context.Background(), []string{"list"}, noenv, out); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"tables", "execstats", "audit"} {
		if !strings.Contains(out.String(), n) {
			t.Errorf("list = %q, want %s", out, n)
		}
	}
}
