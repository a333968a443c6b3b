package sqlite_test

import (
	"database/sql"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// fixture copies the hand-made ledger in the seed docs' schema
// (testdata/README.md at the module's root) and returns the copy's path: the
// store migrates what it opens.
func fixture(t *testing.T) string {
	t.Helper()
	return testenv.Fixture(t, "seed-schema-ledger.db")
}

func indexes(t *testing.T, path string) map[string]bool {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rows, err := db.Query(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'alineo_events'`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		out[n] = true
	}
	return out
}

func TestFixtureFromTypeScriptSDK(t *testing.T) {
	path := fixture(t)
	if ix := indexes(t, path); !ix["alineo_events_sandbox_id"] || !ix["alineo_events_name"] || ix["alineo_events_name_sandbox_ts"] {
		t.Fatalf("fixture indexes = %v, want the two old ones and no composite one", ix)
	}
	s := open(t, path)
	c := t.Context()

	ci, err := s.ReadAll(c, "ci-job", "sbx-a1")
	if err != nil {
		t.Fatal(err)
	}
	wantEvents := []events.Event{events.SandboxCreated, events.ExecStarted, events.ExecOutput, events.ExecCompleted,
		events.CheckpointCreated, events.ExecStarted, events.ExecOutput, events.ExecCompleted, events.SandboxClosed}
	if len(ci) != len(wantEvents) {
		t.Fatalf("ci-job: %d entries, want %d", len(ci), len(wantEvents))
	}
	for i, e := range ci {
		if e.Event != wantEvents[i] || e.Seq != uint64(i+1) {
			t.Fatalf("ci-job entry %d = %s seq %d, want %s seq %d", i, e.Event, e.Seq, wantEvents[i], i+1)
		}
		if err := events.Validate(e); err != nil {
			t.Fatalf("ci-job entry %d does not validate: %v", i, err)
		}
	}
	var out events.ExecOutputPayload
	if err := ci[6].Decode(&out); err != nil || out.Type != events.Stderr || string(out.Bytes()) != "Traceback: boom" {
		t.Fatalf("ci-job output = %+v, %v", out, err)
	}

	agent := `agent "quoted"; DROP TABLE x;--`
	b2, err := s.ReadAll(c, agent, "sbx-b2")
	if err != nil {
		t.Fatal(err)
	}
	if len(b2) != 7 {
		t.Fatalf("%s: %d entries, want 7", agent, len(b2))
	}
	// The three entries of the same millisecond keep their order.
	if b2[1].Event != events.ExecStarted || b2[2].Event != events.ExecOutput || b2[3].Event != events.ExecCompleted {
		t.Fatalf("same-millisecond entries = %s, %s, %s", b2[1].Event, b2[2].Event, b2[3].Event)
	}
	if err := b2[2].Decode(&out); err != nil || out.Text != "héllo 👋" {
		t.Fatalf("non-ASCII output = %q, %v; want %q", out.Text, err, "héllo 👋")
	}
	if last := b2[6]; last.Branch == nil || *last.Branch != 1 || last.Event != events.ExecStarted {
		t.Fatalf("last entry = %+v, want exec.started on branch 1", last)
	}
	if b2[0].Branch != nil || b2[4].Payload != nil {
		t.Fatalf("absent branch or payload read back as present: %+v %+v", b2[0], b2[4])
	}

	// The summary was backfilled from the entries.
	all, err := s.ListAllSandboxDetails(c, adapters.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []adapters.SandboxDetails{
		{Name: agent, SandboxID: "sbx-b2", Status: adapters.StatusRunning, StartedAt: 1764400002000, ExecCount: 1, RunID: "run-2"},
		{Name: "ci-job", SandboxID: "sbx-a1", Status: adapters.StatusCompleted, StartedAt: 1764400000000, CompletedAt: 1764400001800, ExecCount: 2, RunID: "run-1"},
	}
	if len(all) != 2 || all[0] != want[0] || all[1] != want[1] {
		t.Fatalf("details:\n got %+v\nwant %+v", all, want)
	}
	cps, err := s.ListCheckpoints(c, "ci-job", "sbx-a1")
	if err != nil || len(cps) != 1 || cps[0] != (adapters.CheckpointInfo{SnapshotID: "snap-1", Tag: "after-install", CreatedAt: 1764400001500}) {
		t.Fatalf("ListCheckpoints = %+v, %v", cps, err)
	}
	envs, err := s.ListEnvironments(c)
	if err != nil || len(envs) != 2 || envs[0].Name != "node-base" || envs[1].Name != "python-base" || envs[0].Fingerprint != "" {
		t.Fatalf("ListEnvironments = %+v, %v; want node-base then python-base", envs, err)
	}

	// New appends keep the summary current and land after the old rows.
	if err := s.Append(c, events.New(1764400003000, agent, "sbx-b2", -1, events.SandboxClosed, nil)); err != nil {
		t.Fatal(err)
	}
	d, err := s.GetSandboxDetails(c, agent, "sbx-b2")
	if err != nil || d == nil || d.Status != adapters.StatusCompleted || d.CompletedAt != 1764400003000 {
		t.Fatalf("details after close = %+v, %v", d, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	// The old single-column indexes are kept: the TypeScript SDK's connect()
	// would create them again (a rebuild of each on a large table).
	ix := indexes(t, path)
	if !ix["alineo_events_sandbox_id"] || !ix["alineo_events_name"] {
		t.Fatalf("old single-column indexes dropped: %v", ix)
	}
	if !ix["alineo_events_name_sandbox_ts"] || !ix["alineo_events_ledger_seq"] {
		t.Fatalf("indexes = %v, want the composite and the ledger_seq ones", ix)
	}

	// Opening the migrated file again changes nothing and backfills nothing twice.
	s2 := open(t, path)
	d, err = s2.GetSandboxDetails(c, "ci-job", "sbx-a1")
	if err != nil || d == nil || *d != want[1] {
		t.Fatalf("details after reopening = %+v, %v; want %+v", d, err, want[1])
	}
}
