package sqlite

import (
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/adapters"
)

// TestDetailsQueriesUseIndexes checks that the details lists are served by an
// index in order, without a sort over the whole table.
func TestDetailsQueriesUseIndexes(t *testing.T) {
	s, err := Open(t.TempDir()+"/plan.db", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, _, err := s.dbs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		where string
		a     []any
		index string
	}{
		{"all", "", nil, "alineo_sandbox_details_started"},
		{"before", " AND started_at < ?", []any{int64(5)}, "alineo_sandbox_details_started"},
		{"status", " AND status = ?", []any{string(adapters.StatusRunning)}, "alineo_sandbox_details_status_started"},
		{"name", " AND name = ?", []any{"job"}, "alineo_sandbox_details_name_started"},
		{"run id", " AND run_id = ?", []any{"run-1"}, "alineo_sandbox_details_run_started"},
		{"sandbox id", " AND sandbox_id = ?", []any{"sb-1"}, "alineo_sandbox_details_sandbox_started"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := `EXPLAIN QUERY PLAN SELECT ` + detailsCols + ` FROM alineo_sandbox_details WHERE started_at IS NOT NULL` +
				tt.where + ` ORDER BY started_at DESC, name, sandbox_id LIMIT 20`
			rows, err := w.QueryContext(t.Context(), q, tt.a...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, notused int
				var detail string
				if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			got := strings.Join(plan, "; ")
			if !strings.Contains(got, tt.index) || strings.Contains(got, "TEMP B-TREE") {
				t.Fatalf("plan = %q, want a scan of %s without a sort", got, tt.index)
			}
		})
	}
}

// TestSharedIndexesPlans checks the plans on a database the TypeScript SDK
// shares (its single-column indexes present): the summary's catch-up probe
// reads only the partial index of rows not folded, and a session's reads stay
// on the composite index.
func TestSharedIndexesPlans(t *testing.T) {
	s, err := Open(t.TempDir()+"/plan.db", Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	w, _, err := s.dbs(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.ExecContext(t.Context(), `CREATE INDEX IF NOT EXISTS alineo_events_sandbox_id ON alineo_events(sandbox_id);
		CREATE INDEX IF NOT EXISTS alineo_events_name ON alineo_events(name); ANALYZE`); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, q string
		a       []any
		index   string
	}{
		{"pending", pendingExists, nil, "alineo_events_unsummarised"},
		{"read all", forwardQuery, []any{"n", "id", 9}, "alineo_events_name_sandbox_ts"},
		{"read all backward", backwardQuery, []any{"n", "id", 9}, "alineo_events_name_sandbox_ts"},
		{"session span", spanQuery, []any{"n", "id"}, "alineo_events_name_sandbox_ts"},
		{"session span exact", exactQuery, []any{"n", "id"}, "alineo_events_name_sandbox_ts"},
		{"read all by id", idForward, []any{1, 9, "n", "id"}, "INTEGER PRIMARY KEY"},
		{"checkpoints", `SELECT ` + entryCols + ` FROM alineo_events WHERE name = ? AND sandbox_id = ? AND event IN ` + checkpointNames + ` ORDER BY ts, id`, []any{"n", "id"}, "alineo_events_name_sandbox_ts"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rows, err := w.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+tt.q, tt.a...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			var plan []string
			for rows.Next() {
				var id, parent, notused int
				var detail string
				if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
					t.Fatal(err)
				}
				plan = append(plan, detail)
			}
			got := strings.Join(plan, "; ")
			if !strings.Contains(got, tt.index) || strings.Contains(got, "TEMP B-TREE") {
				t.Fatalf("plan = %q, want a search of %s without a sort", got, tt.index)
			}
		})
	}
}
