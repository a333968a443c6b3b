package main

import (
	"bytes"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/usage"
)

func TestLedgerVerifyAndAnchor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "l.db")
	s, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	for i, ev := range []events.Event{events.SandboxCreated, events.SandboxPaused, events.SandboxResumed, events.SandboxClosed} {
		if err := s.Append(ctx, events.New(int64(1000+i), "n", "sbx-9", events.SandboxLevel, ev, nil)); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	getenv := func(string) string { return "" }
	var out bytes.Buffer
	if err := run(ctx, []string{"ledger", "verify", "--sqlite", path}, getenv, &out); err != nil {
		t.Fatalf("verify: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "no chain is broken") || !strings.Contains(out.String(), "sbx-9: chained") {
		t.Fatalf("verify output = %q", out.String())
	}
	out.Reset()
	if err := run(ctx, []string{"ledger", "anchor", "--sqlite", path}, getenv, &out); err != nil {
		t.Fatal(err)
	}
	anchors := filepath.Join(t.TempDir(), "anchors.jsonl")
	if err := os.WriteFile(anchors, out.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`UPDATE alineo_events SET ts = 5 WHERE event = 'sandbox.resumed'`); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	err = run(ctx, []string{"ledger", "verify", "--sqlite", path, "--anchors", anchors}, getenv, &out)
	if !errors.Is(err, audit.ErrBroken) || usage.Code(err) != 1 {
		t.Fatalf("verify after an edit: %v (exit %d), want ErrBroken and exit 1", err, usage.Code(err))
	}
	if got := out.String(); !strings.Contains(got, "sbx-9") || !strings.Contains(got, "broken at entry 3") {
		t.Fatalf("verify output = %q, want sbx-9 broken at entry 3", got)
	}
	if err := run(ctx, []string{"ledger", "verify"}, getenv, &out); usage.Code(err) != 2 {
		t.Fatalf("verify without a ledger: %v (exit %d), want a usage error (exit 2)", err, usage.Code(err))
	}
}
