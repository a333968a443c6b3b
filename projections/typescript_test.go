package projections_test

import (
	"context"
	"database/sql"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

// TestProjectIntoTypeScriptVocabulary runs a projector (bus mode) into tables
// a TypeScript SDK reads: the store's Vocabulary is events.TypeScript, so the
// rows hold only its names and payload fields; the details are those of the
// dotted projection, and a rebuild into the same vocabulary equals the live
// tables row for row.
func TestProjectIntoTypeScriptVocabulary(t *testing.T) {
	path := testenv.SQLitePath(t)
	s, err := sqlite.Open(path, sqlite.Config{Vocabulary: events.TypeScript, Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	b := openBus(t, bus.Config{})
	l := newLedger(t, b, bus.LedgerConfig{})
	p := &projections.Projector{Bus: b, Store: s, BatchSize: 100, Logger: slog.New(slog.DiscardHandler)}
	stop := run(t, p)
	publish(t, l, 4, 3, 5)
	caughtUp(t, b, p, 30*time.Second)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT event, payload FROM alineo_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var stored []adaptertest.StoredRow
	for rows.Next() {
		var r adaptertest.StoredRow
		var pl sql.NullString
		if err := rows.Scan(&r.Event, &pl); err != nil {
			t.Fatal(err)
		}
		if pl.Valid {
			r.Payload = []byte(pl.String)
		}
		stored = append(stored, r)
	}
	rows.Close()
	adaptertest.CheckTypeScriptVocabulary(t, stored)

	ctx := context.Background()
	dotted := memory.New()
	if _, err := projections.Rebuild(ctx, b, dotted, nil); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	got, err := s.ListAllSandboxDetails(ctx, adapters.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := dotted.ListAllSandboxDetails(ctx, adapters.ListOptions{})
	if err != nil || len(want) != 4 || !reflect.DeepEqual(got, want) {
		t.Fatalf("details in the TypeScript vocabulary:\n got %+v\nwant %+v (%v)", got, want, err)
	}
	rebuilt, err := sqlite.Open(sqlite.Memory, sqlite.Config{Vocabulary: events.TypeScript})
	if err != nil {
		t.Fatal(err)
	}
	defer rebuilt.Close()
	if _, err := projections.Rebuild(ctx, b, rebuilt, nil); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	if err := projections.Verify(ctx, s, rebuilt); err != nil {
		t.Fatalf("Verify(live, rebuilt), both in the TypeScript vocabulary: %v", err)
	}
}
