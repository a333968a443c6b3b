package audit_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/examples/audit"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
)

func openDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "audit.db")+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func runOver(t *testing.T, b *projections.Runtime, db *sql.DB) *projections.Runtime {
	t.Helper()
	b.Handler, b.Name, b.Filter = audit.New(db, projections.SQLite), audit.Name, audit.Filter
	projectiontest.Start(t, b)
	return b
}

// A hand-made history: one credential bound for two hosts then revoked, a
// second one left bound, and egress changes.
func TestKnownFigures(t *testing.T) {
	b := projectiontest.Bus(t)
	ts := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC).UnixMilli()
	es := []events.Entry{
		events.New(ts, "ci", "sb-1", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-1", EgressDefault: events.Deny}),
		events.New(ts+1, "ci", "sb-1", events.SandboxLevel, events.CredentialBound, events.CredentialPayload{Name: "gh",
			Binding: &events.CredentialBinding{Hosts: []string{"api.github.com", "uploads.github.com"}, Type: "bearer"}}),
		events.New(ts+2, "ci", "sb-1", events.SandboxLevel, events.EgressRuleAdded, events.EgressRulePayload{Action: events.Allow, Target: "api.github.com"}),
		events.New(ts+3, "ci", "sb-1", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Cmd: "git push"}),
		events.New(ts+4, "ci", "sb-1", events.SandboxLevel, events.CredentialRevoked, events.CredentialPayload{Name: "gh"}),
		events.New(ts+5, "ci", "sb-1", events.SandboxLevel, events.EgressRuleRemoved, events.EgressRulePayload{Action: events.Allow, Target: "api.github.com"}),
		events.New(ts+6, "ci", "sb-2", events.SandboxLevel, events.CredentialBound, events.CredentialPayload{Name: "npm",
			Binding: &events.CredentialBinding{Hosts: []string{"registry.npmjs.org"}, Type: "apiKey", Header: "X-Key"}}),
	}
	projectiontest.Publish(t, b, es)
	db := openDB(t)
	r := runOver(t, &projections.Runtime{Bus: b}, db)
	projectiontest.Await(t, r, projectiontest.LastSeq(t, b, audit.Filter), 10*time.Second)
	ctx := context.Background()
	got, err := audit.Bindings(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	want := []audit.Binding{
		{Host: "api.github.com", Credential: "gh", Type: "bearer", Name: "ci", SandboxID: "sb-1", BoundAt: ts + 1, RevokedAt: ts + 4},
		{Host: "registry.npmjs.org", Credential: "npm", Type: "apiKey", Name: "ci", SandboxID: "sb-2", BoundAt: ts + 6},
		{Host: "uploads.github.com", Credential: "gh", Type: "bearer", Name: "ci", SandboxID: "sb-1", BoundAt: ts + 1, RevokedAt: ts + 4},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("bindings = %+v\nwant %+v", got, want)
	}
	hist, err := audit.EgressHistory(ctx, db, projections.SQLite, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	wantHist := []audit.Change{{ts, audit.Default, events.Deny, ""}, {ts + 2, audit.Added, events.Allow, "api.github.com"}, {ts + 5, audit.Removed, events.Allow, "api.github.com"}}
	if !reflect.DeepEqual(hist, wantHist) {
		t.Fatalf("egress history = %+v\nwant %+v", hist, wantHist)
	}
	if p := r.Progress(); p.Applied != 6 {
		t.Fatalf("applied %d, want 6 (the exec.started is filtered out by JetStream)", p.Applied)
	}
}

// The recorded history of 200 sandboxes gives the bindings computed from it
// in memory, and a partitioned pair of workers gives the same rows.
func TestRecordedHistoryAndPartitions(t *testing.T) {
	b := projectiontest.Bus(t)
	es := projectiontest.History(7, 200, 10)
	projectiontest.Publish(t, b, es)
	last := projectiontest.LastSeq(t, b, audit.Filter)
	single := openDB(t)
	r := runOver(t, &projections.Runtime{Bus: b}, single)
	projectiontest.Await(t, r, last, 30*time.Second)

	bound, revoked := 0, 0
	for _, e := range es {
		switch e.Event {
		case events.CredentialBound:
			var p events.CredentialPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			bound += len(p.Binding.Hosts)
		case events.CredentialRevoked:
			revoked++
		}
	}
	got, err := audit.Bindings(context.Background(), single)
	if err != nil {
		t.Fatal(err)
	}
	gotRevoked := 0
	for _, g := range got {
		if g.RevokedAt != 0 {
			gotRevoked++
		}
	}
	if len(got) != bound || gotRevoked != revoked || bound != 200 || revoked != 50 {
		t.Fatalf("%d bindings (%d revoked), want %d (%d revoked)", len(got), gotRevoked, bound, revoked)
	}

	shared := openDB(t)
	var parts []*projections.Runtime
	for i := range 2 {
		parts = append(parts, runOver(t, &projections.Runtime{Bus: b, Partition: projections.Partitioning{N: 2, Index: i}}, shared))
	}
	for _, p := range parts {
		projectiontest.Await(t, p, last, 30*time.Second)
	}
	if err := audit.Verify(context.Background(), single, shared); err != nil {
		t.Fatalf("partitioned differs from single: %v", err)
	}
}
