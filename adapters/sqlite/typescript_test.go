package sqlite_test

import (
	"database/sql"
	"maps"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// TestTypeScriptSDKLedgers opens copies of the ledgers the real TypeScript SDK
// wrote: every session lists with its details, checkpoints and environments.
func TestTypeScriptSDKLedgers(t *testing.T) {
	for _, f := range []adaptertest.TypeScriptFixture{adaptertest.TypeScriptSession, adaptertest.TypeScriptExtras, adaptertest.TypeScriptWorkflow} {
		t.Run(f.File, func(t *testing.T) {
			path := testenv.Fixture(t, f.File)
			s := open(t, path)
			adaptertest.CheckTypeScriptFixture(t, s, f)
			es, err := s.ReadAll(t.Context(), f.Details[len(f.Details)-1].Name, f.Details[len(f.Details)-1].SandboxID)
			if err != nil || len(es) == 0 || es[0].Event != events.TSSandboxCreated {
				t.Fatalf("ReadAll = %d entries, %v; want the rows as stored, sandbox_created first", len(es), err)
			}
			for i, e := range es {
				if err := events.Validate(e); err != nil {
					t.Fatalf("entry %d (%s) does not validate: %v", i, e.Event, err)
				}
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			// Both SDKs' indexes stay: nothing to rebuild on the next open of either.
			if ix := indexes(t, path); !ix["alineo_events_sandbox_id"] || !ix["alineo_events_name"] || !ix["alineo_events_name_sandbox_ts"] {
				t.Fatalf("indexes = %v, want the TypeScript SDK's and ours", ix)
			}
			adaptertest.CheckTypeScriptFixture(t, open(t, path), f) // reopened: nothing counted twice
		})
	}
}

// insertAsTypeScript appends es past the store, as the TypeScript SDK's
// SQLite adapter does (its columns, no summary).
func insertAsTypeScript(t *testing.T, path string, es []events.Entry) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, e := range es {
		var payload any
		if e.Payload != nil {
			payload = string(e.Payload)
		}
		if _, err := db.Exec(`INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, e.SandboxID, e.Name, e.StepIndex, nil, string(e.Event), payload, nil, e.Ts); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSharedWithTypeScriptSDK appends a Go session to a copy of session.db,
// then rows as the TypeScript SDK appends them (a new session, and rows of
// the Go session): every session lists right, the summary catching up on the
// rows it did not write, and nothing is counted twice.
func TestSharedWithTypeScriptSDK(t *testing.T) {
	path := testenv.Fixture(t, adaptertest.TypeScriptSession.File)
	c := t.Context()
	s := open(t, path)
	adaptertest.CheckTypeScriptFixture(t, s, adaptertest.TypeScriptSession)

	const T = 1796200000000
	if err := s.AppendBatch(c, adaptertest.GoRows("go-run", "go-1", "run-go", T, 3, false)); err != nil {
		t.Fatal(err)
	}
	insertAsTypeScript(t, path, adaptertest.TypeScriptRows("ts-late", "ts-late-1", "run-ts", T+100, 2, true))
	insertAsTypeScript(t, path, []events.Entry{
		{Ts: T + 200, Name: "go-run", SandboxID: "go-1", StepIndex: 4, Event: events.TSExecComplete, Payload: []byte(`{"exitCode":0,"seq":4}`)},
		{Ts: T + 201, Name: "go-run", SandboxID: "go-1", StepIndex: -1, Event: events.TSSandboxClosed},
	})
	// Our own append after theirs.
	if err := s.Append(c, events.New(T+300, "ts-late", "ts-late-1", 3, events.ExecCompleted, events.ExecCompletedPayload{Seq: 3})); err != nil {
		t.Fatal(err)
	}
	late := adapters.SandboxDetails{Name: "ts-late", SandboxID: "ts-late-1", Status: adapters.StatusCompleted,
		StartedAt: T + 100, CompletedAt: T + 103, ExecCount: 3, RunID: "run-ts"}
	goRun := adapters.SandboxDetails{Name: "go-run", SandboxID: "go-1", Status: adapters.StatusCompleted,
		StartedAt: T, CompletedAt: T + 201, ExecCount: 4, RunID: "run-go"}
	d, err := s.GetSandboxDetails(c, "ts-late", "ts-late-1")
	if err != nil || d == nil || *d != late {
		t.Fatalf("GetSandboxDetails(ts-late) = %+v, %v; want %+v", d, err, late)
	}
	want := append([]adapters.SandboxDetails{late, goRun}, adaptertest.TypeScriptSession.Details...)
	for _, st := range []*sqlite.Store{s, open(t, path)} { // this store, and a process opening the file afresh
		all, err := st.ListAllSandboxDetails(c, adapters.ListOptions{})
		if err != nil || len(all) != len(want) {
			t.Fatalf("ListAllSandboxDetails = %+v, %v; want %+v", all, err, want)
		}
		for i := range want {
			if all[i] != want[i] {
				t.Fatalf("session %d = %+v, want %+v", i, all[i], want[i])
			}
		}
		page, err := st.ListAllSandboxDetails(c, adapters.ListOptions{Limit: 2})
		if err != nil || len(page) != 2 || page[0] != late || page[1] != goRun {
			t.Fatalf("first page = %+v, %v", page, err)
		}
		cps, err := st.ListCheckpoints(c, "ts-late", "ts-late-1")
		if err != nil || len(cps) != 1 || cps[0].SnapshotID != "snap-ts-late-1" || cps[0].Tag != "t1" {
			t.Fatalf("ListCheckpoints(ts-late) = %+v, %v", cps, err)
		}
	}
	cps := maps.Clone(adaptertest.TypeScriptSession.Checkpoints)
	cps[events.Session{Name: "ts-late", SandboxID: "ts-late-1"}] = []adapters.CheckpointInfo{{SnapshotID: "snap-ts-late-1", Tag: "t1", CreatedAt: T + 101}}
	cps[events.Session{Name: "go-run", SandboxID: "go-1"}] = []adapters.CheckpointInfo{{SnapshotID: "snap-go-1", Tag: "t1", CreatedAt: T + 1}}
	adaptertest.CheckTypeScriptFixture(t, s, adaptertest.TypeScriptFixture{File: adaptertest.TypeScriptSession.File, Details: want, Checkpoints: cps})
}

// storedRows reads every row of alineo_events as stored.
func storedRows(t *testing.T, path string) []adaptertest.StoredRow {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT event, payload FROM alineo_events ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []adaptertest.StoredRow
	for rows.Next() {
		var r adaptertest.StoredRow
		var p sql.NullString
		if err := rows.Scan(&r.Event, &p); err != nil {
			t.Fatal(err)
		}
		if p.Valid {
			r.Payload = []byte(p.String)
		}
		out = append(out, r)
	}
	return out
}

// TestVocabularyTypeScript writes with Vocabulary: TypeScript through every
// write path: the file holds only the TypeScript SDK's names and payload
// fields, and reads back as the same sessions.
func TestVocabularyTypeScript(t *testing.T) {
	path := testenv.SQLitePath(t)
	s, err := sqlite.Open(path, sqlite.Config{Vocabulary: events.TypeScript})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	c := t.Context()
	const T = 1796300000000
	one := adaptertest.GoRows("one", "sb-1", "run-1", T, 2, true)
	for _, e := range one {
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
	adaptertest.CheckTypeScriptVocabulary(t, storedRows(t, path))

	all, err := s.ListAllSandboxDetails(c, adapters.ListOptions{})
	if err != nil || len(all) != 3 || all[0].ExecCount != 1 || all[1].ExecCount != 3 || all[2].ExecCount != 2 ||
		all[0].Status != adapters.StatusCompleted || all[1].Status != adapters.StatusRunning || all[2].RunID != "run-1" {
		t.Fatalf("ListAllSandboxDetails = %+v, %v", all, err)
	}
	es, err := s.ReadAll(c, "one", "sb-1")
	if err != nil || len(es) != len(one) || es[0].Event != events.TSSandboxCreated {
		t.Fatalf("ReadAll = %+v, %v", es, err)
	}
	var start events.ExecStartedPayload
	if err := es[1].Decode(&start); err != nil || es[1].Event != events.TSExecStart || start.Cmd != "printf 1" || start.Seq != 1 {
		t.Fatalf("exec_start = %s %s, %v", es[1].Event, es[1].Payload, err)
	}
	cp, err := s.LastCheckpoint(c, "one", "sb-1")
	if err != nil || cp == nil || cp.Event != events.TSCheckpointCreated {
		t.Fatalf("LastCheckpoint = %+v, %v", cp, err)
	}
	if cps, err := s.ListCheckpoints(c, "one", "sb-1"); err != nil || len(cps) != 1 || cps[0].SnapshotID != "snap-sb-1" || cps[0].Tag != "t1" {
		t.Fatalf("ListCheckpoints = %+v, %v", cps, err)
	}
}

// TestVocabularyInvalid refuses a vocabulary that is neither.
func TestVocabularyInvalid(t *testing.T) {
	if _, err := sqlite.Open(sqlite.Memory, sqlite.Config{Vocabulary: 7}); err == nil {
		t.Fatal("Open with Vocabulary 7 succeeded")
	}
}
