package sqlite_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// TestReadAllRowsWrittenByHand reads back rows another writer stored as
// TEXT, NULL or numbers where the SDK writes other types, and fails with an
// error, not a panic, on a row it cannot read.
func TestReadAllRowsWrittenByHand(t *testing.T) {
	ctx := context.Background()
	path := testenv.SQLitePath(t)
	s := open(t, path)
	if _, err := s.ReadAll(ctx, "x", "y"); err != nil { // migrate
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer raw.Close()
	ins := `INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`
	rows := [][]any{
		{"S", "n", 1, nil, "exec.started", `{"seq":1,"cmd":"ls"}`, nil, 10},
		{"S", "n", 1, 2, "exec.output", `"{\"seq\":1,\"type\":\"stdout\",\"text\":\"a\"}"`, "boom", 11}, // JSON held in a JSON string
		{"S", "n", 1, nil, "exec.completed", nil, 7, 12},                                                // a numeric error column
		{"S", "n", 1, nil, "exec.completed", "", nil, 13},                                               // an empty payload
		{"T", "n", 1, nil, "exec.started", `{}`, nil, 1},                                                // another session
	}
	for _, r := range rows {
		if _, err := raw.ExecContext(ctx, ins, r...); err != nil {
			t.Fatal(err)
		}
	}
	es, err := s.ReadAll(ctx, "n", "S")
	if err != nil {
		t.Fatal(err)
	}
	if len(es) != 4 {
		t.Fatalf("ReadAll = %d entries, want 4", len(es))
	}
	for i, e := range es {
		if e.Name != "n" || e.SandboxID != "S" || e.StepIndex != 1 || e.Ts != int64(10+i) {
			t.Errorf("entry %d = %+v", i, e)
		}
	}
	if es[1].Branch == nil || *es[1].Branch != 2 || es[1].Error != "boom" || es[1].Event != events.ExecOutput {
		t.Errorf("entry 1 = %+v", es[1])
	}
	var p events.ExecOutputPayload
	if err := json.Unmarshal(es[1].Payload, &p); err != nil || p.Text != "a" {
		t.Errorf("entry 1 payload %s: %+v, %v", es[1].Payload, p, err)
	}
	if es[0].Branch != nil || es[0].Error != "" || string(es[0].Payload) != `{"seq":1,"cmd":"ls"}` {
		t.Errorf("entry 0 = %+v", es[0])
	}
	if es[2].Payload != nil || es[2].Error != "7" {
		t.Errorf("entry 2 = %+v, want no payload and error \"7\"", es[2])
	}
	if es[3].Payload == nil || len(es[3].Payload) != 0 {
		t.Errorf("entry 3 payload = %#v, want empty, not nil", es[3].Payload)
	}
	// Appending to one payload does not write into the next one's bytes.
	_ = append(es[0].Payload, 'x')
	if es[1].Payload[0] != '{' {
		t.Errorf("entry 1 payload changed by an append to entry 0's: %s", es[1].Payload)
	}

	if _, err := raw.ExecContext(ctx, ins, "S", "n", 2, nil, "exec.started", `{}`, nil, "not a time"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadAll(ctx, "n", "S"); err == nil || !strings.Contains(err.Error(), "read all") {
		t.Fatalf("ReadAll with a text ts = %v, want an error", err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := s.ReadAll(cctx, "n", "S"); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReadAll(cancelled) = %v, want context.Canceled", err)
	}
}
