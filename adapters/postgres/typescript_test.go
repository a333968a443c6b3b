package postgres_test

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/postgres"
	_ "github.com/alineo-labs/alineo/adapters/sqlite" // the "sqlite" driver, to read the fixtures
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// tsSchema is the schema the TypeScript SDK's Postgres adapter creates on
// connect(), its single-column indexes included.
const tsSchema = `
CREATE TABLE IF NOT EXISTS alineo_events (id BIGSERIAL PRIMARY KEY, sandbox_id TEXT NOT NULL, name TEXT NOT NULL,
  step_idx INTEGER NOT NULL, branch INTEGER, event TEXT NOT NULL, payload JSONB, error TEXT, ts BIGINT NOT NULL);
CREATE INDEX IF NOT EXISTS alineo_events_sandbox_id ON alineo_events(sandbox_id);
CREATE INDEX IF NOT EXISTS alineo_events_name ON alineo_events(name);
CREATE TABLE IF NOT EXISTS alineo_environments (name TEXT PRIMARY KEY, snapshot_id TEXT NOT NULL, image TEXT NOT NULL, built_at BIGINT NOT NULL);`

// insertAsTypeScript appends es as the TypeScript SDK's Postgres adapter
// does: its columns, and every payload a JSONB string holding the JSON text
// (postgres.js given JSON.stringify(payload)).
func insertAsTypeScript(t *testing.T, conn *pgx.Conn, es []events.Entry) {
	t.Helper()
	b := &pgx.Batch{}
	for _, e := range es {
		var payload *string
		if e.Payload != nil {
			p := string(e.Payload)
			payload = &p
		}
		b.Queue(`INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts)
			VALUES ($1, $2, $3, $4, $5, to_jsonb($6::text), $7, $8)`, e.SandboxID, e.Name, e.StepIndex, e.Branch, string(e.Event), payload, nil, e.Ts)
	}
	if err := conn.SendBatch(t.Context(), b).Close(); err != nil {
		t.Fatal(err)
	}
}

// typeScriptDatabase returns the DSN of a database holding the rows of the
// fixture f in the TypeScript Postgres adapter's shape, and a connection to it.
func typeScriptDatabase(t *testing.T, f adaptertest.TypeScriptFixture) (string, *pgx.Conn) {
	t.Helper()
	src, err := sql.Open("sqlite", testenv.Fixture(t, f.File))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	rows, err := src.Query(`SELECT sandbox_id, name, step_idx, branch, event, payload, ts FROM alineo_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	var es []events.Entry
	for rows.Next() {
		var (
			e       events.Entry
			branch  sql.NullInt64
			ev      string
			payload sql.NullString
		)
		if err := rows.Scan(&e.SandboxID, &e.Name, &e.StepIndex, &branch, &ev, &payload, &e.Ts); err != nil {
			t.Fatal(err)
		}
		e.Event = events.Event(ev)
		if payload.Valid {
			e.Payload = []byte(payload.String)
		}
		es = append(es, e)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	dsn := testenv.Postgres(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	if _, err := conn.Exec(t.Context(), tsSchema); err != nil {
		t.Fatal(err)
	}
	insertAsTypeScript(t, conn, es)
	for _, env := range f.Environments {
		if _, err := conn.Exec(t.Context(), `INSERT INTO alineo_environments VALUES ($1, $2, $3, $4)`,
			env.Name, env.SnapshotID, env.Image, env.BuiltAt); err != nil {
			t.Fatal(err)
		}
	}
	var strings int
	if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM alineo_events WHERE jsonb_typeof(payload) = 'string'`).Scan(&strings); err != nil || strings == 0 {
		t.Fatalf("%d payloads stored as JSONB strings, %v; want the TypeScript adapter's shape", strings, err)
	}
	return dsn, conn
}

// TestTypeScriptSDKLedgers reads the TypeScript SDK's ledgers in the shape
// of its Postgres adapter (payloads as JSONB strings): every session lists
// with its details, checkpoints and environments, and payloads read as the
// JSON they hold.
func TestTypeScriptSDKLedgers(t *testing.T) {
	for _, f := range []adaptertest.TypeScriptFixture{adaptertest.TypeScriptSession, adaptertest.TypeScriptExtras, adaptertest.TypeScriptWorkflow} {
		t.Run(f.File, func(t *testing.T) {
			dsn, conn := typeScriptDatabase(t, f)
			s := open(t, dsn)
			adaptertest.CheckTypeScriptFixture(t, s, f)
			last := f.Details[len(f.Details)-1]
			es, err := s.ReadAll(t.Context(), last.Name, last.SandboxID)
			if err != nil || len(es) == 0 || es[0].Event != events.TSSandboxCreated {
				t.Fatalf("ReadAll = %d entries, %v", len(es), err)
			}
			var p events.SandboxCreatedPayload
			if es[0].Payload[0] != '{' || es[0].Decode(&p) != nil || p.SandboxID != last.SandboxID {
				t.Fatalf("sandbox_created payload = %s, want the JSON object it holds", es[0].Payload)
			}
			for i, e := range es {
				if err := events.Validate(e); err != nil {
					t.Fatalf("entry %d (%s) does not validate: %v", i, e.Event, err)
				}
			}
			// The TypeScript SDK connects again: its CREATE INDEX IF NOT EXISTS
			// finds its indexes, nothing is rebuilt; and we open again.
			if _, err := conn.Exec(t.Context(), tsSchema); err != nil {
				t.Fatal(err)
			}
			adaptertest.CheckTypeScriptFixture(t, open(t, dsn), f)
		})
	}
}

// TestSharedWithTypeScriptSDK appends a Go session to the TypeScript SDK's
// database, then rows as its Postgres adapter appends them: every session
// lists right, the summary catching up, nothing counted twice.
func TestSharedWithTypeScriptSDK(t *testing.T) {
	dsn, conn := typeScriptDatabase(t, adaptertest.TypeScriptSession)
	c := t.Context()
	s := open(t, dsn)
	adaptertest.CheckTypeScriptFixture(t, s, adaptertest.TypeScriptSession)

	const T = 1796200000000
	if err := s.AppendBatch(c, adaptertest.GoRows("go-run", "go-1", "run-go", T, 3, false)); err != nil {
		t.Fatal(err)
	}
	insertAsTypeScript(t, conn, adaptertest.TypeScriptRows("ts-late", "ts-late-1", "run-ts", T+100, 2, true))
	insertAsTypeScript(t, conn, []events.Entry{
		{Ts: T + 200, Name: "go-run", SandboxID: "go-1", StepIndex: 4, Event: events.TSExecComplete, Payload: []byte(`{"exitCode":0,"seq":4}`)},
		{Ts: T + 201, Name: "go-run", SandboxID: "go-1", StepIndex: -1, Event: events.TSSandboxClosed},
	})
	if err := s.Append(c, events.New(T+300, "ts-late", "ts-late-1", 3, events.ExecCompleted, events.ExecCompletedPayload{Seq: 3})); err != nil {
		t.Fatal(err)
	}
	late := adapters.SandboxDetails{Name: "ts-late", SandboxID: "ts-late-1", Status: adapters.StatusCompleted,
		StartedAt: T + 100, CompletedAt: T + 103, ExecCount: 3, RunID: "run-ts"}
	goRun := adapters.SandboxDetails{Name: "go-run", SandboxID: "go-1", Status: adapters.StatusCompleted,
		StartedAt: T, CompletedAt: T + 201, ExecCount: 4, RunID: "run-go"}
	want := append([]adapters.SandboxDetails{late, goRun}, adaptertest.TypeScriptSession.Details...)
	cps := maps.Clone(adaptertest.TypeScriptSession.Checkpoints)
	cps[events.Session{Name: "ts-late", SandboxID: "ts-late-1"}] = []adapters.CheckpointInfo{{SnapshotID: "snap-ts-late-1", Tag: "t1", CreatedAt: T + 101}}
	cps[events.Session{Name: "go-run", SandboxID: "go-1"}] = []adapters.CheckpointInfo{{SnapshotID: "snap-go-1", Tag: "t1", CreatedAt: T + 1}}
	f := adaptertest.TypeScriptFixture{File: adaptertest.TypeScriptSession.File, Details: want, Checkpoints: cps}
	adaptertest.CheckTypeScriptFixture(t, s, f)
	adaptertest.CheckTypeScriptFixture(t, open(t, dsn), f) // a process opening the database afresh
}

// TestVocabularyTypeScript writes with Vocabulary: TypeScript through every
// write path: the table holds only the TypeScript SDK's names and payload
// fields (as JSONB objects), and reads back as the same sessions.
func TestVocabularyTypeScript(t *testing.T) {
	dsn := testenv.Postgres(t)
	s, err := postgres.Open(dsn, postgres.Config{Vocabulary: events.TypeScript})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := t.Context()
	const T = 1796300000000
	for _, e := range adaptertest.GoRows("one", "sb-1", "run-1", T, 2, true) {
		if err := s.Append(c, e); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.AppendBatch(c, adaptertest.GoRows("batch", "sb-2", "run-2", T+10, 3, false)); err != nil {
		t.Fatal(err)
	}
	projected := adaptertest.GoRows("proj", "sb-3", "run-3", T+20, 1, true)
	for i := range projected {
		projected[i].Seq = uint64(i + 1)
	}
	if err := s.ApplyBatch(c, "p", projected, uint64(len(projected))); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(c, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(c, `SELECT event, payload::text FROM alineo_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (adaptertest.StoredRow, error) {
		var sr adaptertest.StoredRow
		var p *string
		err := r.Scan(&sr.Event, &p)
		if p != nil {
			sr.Payload = []byte(*p)
		}
		return sr, err
	})
	if err != nil {
		t.Fatal(err)
	}
	adaptertest.CheckTypeScriptVocabulary(t, stored)
	all, err := s.ListAllSandboxDetails(c, adapters.ListOptions{})
	if err != nil || len(all) != 3 || all[0].ExecCount != 1 || all[1].ExecCount != 3 || all[2].ExecCount != 2 ||
		all[1].Status != adapters.StatusRunning || all[2].RunID != "run-1" {
		t.Fatalf("ListAllSandboxDetails = %+v, %v", all, err)
	}
	if cps, err := s.ListCheckpoints(c, "one", "sb-1"); err != nil || len(cps) != 1 || cps[0].SnapshotID != "snap-sb-1" {
		t.Fatalf("ListCheckpoints = %+v, %v", cps, err)
	}
}

// TestCatchUpLateCommit: a foreign row whose id is below rows folded already
// (its transaction took the id first and committed last) still lists, within
// the store's full probe of the index.
func TestCatchUpLateCommit(t *testing.T) {
	dsn := testenv.Postgres(t)
	s := open(t, dsn)
	c := t.Context()
	if _, err := s.ListAllSandboxDetails(c, adapters.ListOptions{}); err != nil { // migrate
		t.Fatal(err)
	}
	conn, err := pgx.Connect(c, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	ins := `INSERT INTO alineo_events (id, sandbox_id, name, step_idx, event, payload, ts) VALUES ($1, $2, 'n', -1, 'sandbox_created', to_jsonb($3::text), $4)`
	if _, err := conn.Exec(c, ins, 5_000_000, "high", `{"sandboxId":"high"}`, 2000); err != nil {
		t.Fatal(err)
	}
	if all, err := s.ListAllSandboxDetails(c, adapters.ListOptions{}); err != nil || len(all) != 1 {
		t.Fatalf("ListAllSandboxDetails = %+v, %v; want high", all, err)
	}
	if _, err := conn.Exec(c, ins, 4_000_000, "late", `{"sandboxId":"late","runId":"r"}`, 1000); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, func() error {
		d, err := s.GetSandboxDetails(c, "n", "late")
		if err != nil || d == nil || d.RunID != "r" {
			return fmt.Errorf("late session = %+v, %v", d, err)
		}
		return nil
	})
}
