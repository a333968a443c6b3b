package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

func created(ts int64, name, id string) events.Entry {
	return events.New(ts, name, id, -1, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: id})
}

func TestOpenValidates(t *testing.T) {
	if _, err := postgres.Open("postgres://host:notaport/db", postgres.Config{}); !errors.Is(err, postgres.ErrInvalidConfig) {
		t.Fatalf("Open(bad port) = %v, want ErrInvalidConfig", err)
	}
	if _, err := postgres.Open("", postgres.Config{MaxConns: -1}); !errors.Is(err, postgres.ErrInvalidConfig) {
		t.Fatalf("Open(MaxConns -1) = %v, want ErrInvalidConfig", err)
	}
}

// TestUnreachableIsUnavailable: Open does not connect; first use against a
// closed port fails fast with ErrUnavailable, and Close still works.
func TestUnreachableIsUnavailable(t *testing.T) {
	s, err := postgres.Open("postgres://postgres@127.0.0.1:1/x?sslmode=disable", postgres.Config{ConnectTimeout: time.Second})
	if err != nil {
		t.Fatalf("Open = %v; want no error without connecting", err)
	}
	start := time.Now()
	_, err = s.ReadAll(t.Context(), "n", "id")
	if !errors.Is(err, adapters.ErrUnavailable) {
		t.Fatalf("ReadAll = %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ReadAll took %v to fail", d)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReadAll(t.Context(), "n", "id"); !errors.Is(err, adapters.ErrClosed) {
		t.Fatalf("ReadAll after Close = %v, want ErrClosed", err)
	}
}

func TestDatabaseURLFromEnvironment(t *testing.T) {
	dsn := testenv.Postgres(t)
	t.Setenv("DATABASE_URL", dsn)
	s := open(t, "")
	if err := s.Append(t.Context(), created(1, "n", "id")); err != nil {
		t.Fatal(err)
	}
	other := open(t, dsn)
	if es, err := other.ReadAll(t.Context(), "n", "id"); err != nil || len(es) != 1 {
		t.Fatalf("ReadAll via the DSN = %d entries, %v; want the entry written via DATABASE_URL", len(es), err)
	}
}

// TestTwoStoresMigrateAtOnce opens several stores (as several processes
// would) on one empty database and uses them all at the same moment.
func TestTwoStoresMigrateAtOnce(t *testing.T) {
	dsn := testenv.Postgres(t)
	const n = 4
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		s := open(t, dsn)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for j := range 20 {
				if err := s.Append(t.Context(), created(int64(j+1), "n", fmt.Sprint(i, "-", j))); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	all, err := open(t, dsn).ListAllSandboxDetails(t.Context(), adapters.ListOptions{})
	if err != nil || len(all) != n*20 {
		t.Fatalf("ListAllSandboxDetails = %d, %v; want %d", len(all), err, n*20)
	}
}

func TestPayloadJSONB(t *testing.T) {
	s := open(t, testenv.Postgres(t))
	c := t.Context()
	// NUL cannot live in JSONB: a typed error naming the payload, nothing written.
	bad := events.Entry{Ts: 1, Name: "n", SandboxID: "id", StepIndex: 1, Event: events.ExecOutput,
		Payload: json.RawMessage(`{"seq":1,"type":"stdout","text":"a\u0000b"}`)}
	err := s.Append(c, bad)
	var ve *events.ValidationError
	if !errors.Is(err, adapters.ErrInvalidEntry) || !errors.As(err, &ve) || ve.Field != "payload" {
		t.Fatalf("Append(NUL in payload) = %v, want a ValidationError on payload", err)
	}
	// Output holding NUL goes through NewOutput's Data and round-trips.
	chunk := []byte("a\x00b")
	if err := s.AppendBatch(c, []events.Entry{events.New(2, "n", "id", 1, events.ExecOutput, events.NewOutput(1, events.Stdout, chunk))}); err != nil {
		t.Fatal(err)
	}
	es, err := s.ReadAll(c, "n", "id")
	if err != nil || len(es) != 1 {
		t.Fatalf("ReadAll = %d, %v; want 1", len(es), err)
	}
	var p events.ExecOutputPayload
	if err := es[0].Decode(&p); err != nil || string(p.Bytes()) != string(chunk) {
		t.Fatalf("chunk = %q, %v; want %q", p.Bytes(), err, chunk)
	}
}

// TestServerGoesAway stops the server under a running store: calls fail with
// ErrUnavailable instead of hanging, and the same store works once it is back.
func TestServerGoesAway(t *testing.T) {
	srv := testenv.PostgresServer(t)
	s := open(t, srv.DSN())
	c := t.Context()
	if err := s.Append(c, created(1, "n", "before")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for i, call := range []func(context.Context) error{
		func(ctx context.Context) error { return s.Append(ctx, created(2, "n", "during")) },
		func(ctx context.Context) error { _, err := s.ReadAll(ctx, "n", "before"); return err },
		func(ctx context.Context) error {
			return s.AppendBatch(ctx, []events.Entry{created(3, "n", "during-batch")})
		},
	} {
		ctx, cancel := context.WithTimeout(c, 20*time.Second)
		start := time.Now()
		err := call(ctx)
		cancel()
		if !errors.Is(err, adapters.ErrUnavailable) {
			t.Fatalf("call %d with the server down = %v, want ErrUnavailable", i, err)
		}
		if d := time.Since(start); d > 10*time.Second {
			t.Fatalf("call %d took %v to fail", i, d)
		}
	}
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 15*time.Second, func() error {
		return s.Append(c, created(4, "n", "after"))
	})
	all, err := s.ListAllSandboxDetails(c, adapters.ListOptions{})
	if err != nil || len(all) != 2 || all[0].SandboxID != "after" || all[1].SandboxID != "before" {
		t.Fatalf("ListAllSandboxDetails = %+v, %v; want after and before", all, err)
	}
}

// TestMigratesTypeScriptSchema builds a database as the TypeScript SDK leaves
// it (its schema, the old single-column indexes, rows) and opens it.
func TestMigratesTypeScriptSchema(t *testing.T) {
	dsn := testenv.Postgres(t)
	c := t.Context()
	conn, err := pgx.Connect(c, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(c, `
CREATE TABLE alineo_events (id BIGSERIAL PRIMARY KEY, sandbox_id TEXT NOT NULL, name TEXT NOT NULL,
  step_idx INT NOT NULL, branch INT, event TEXT NOT NULL, payload JSONB, error TEXT, ts BIGINT NOT NULL);
CREATE INDEX alineo_events_sandbox_id ON alineo_events(sandbox_id);
CREATE INDEX alineo_events_name ON alineo_events(name);
CREATE TABLE alineo_environments (name TEXT PRIMARY KEY, snapshot_id TEXT NOT NULL, image TEXT NOT NULL, built_at BIGINT NOT NULL);
INSERT INTO alineo_events (sandbox_id, name, step_idx, branch, event, payload, error, ts) VALUES
 ('sbx-a1', 'ci-job', -1, NULL, 'sandbox.created', '{"sandboxId": "sbx-a1", "runId": "run-1"}', NULL, 1000),
 ('sbx-a1', 'ci-job', 1, NULL, 'exec.started', '{"cmd": "true", "seq": 1}', NULL, 1001),
 ('sbx-a1', 'ci-job', 1, NULL, 'exec.completed', '{"seq": 1, "exitCode": 0}', NULL, 1002),
 ('sbx-a1', 'ci-job', -1, NULL, 'sandbox.closed', NULL, NULL, 1003),
 ('sbx-b2', 'agent "q"', -1, NULL, 'sandbox.created', '{"sandboxId": "sbx-b2"}', NULL, 2000),
 ('sbx-b2', 'agent "q"', 1, 1, 'exec.started', '{"cmd": "sleep 9", "seq": 1}', NULL, 2001);
INSERT INTO alineo_environments VALUES ('node-base', 'snap-2', 'node:20', 5);`)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, dsn)
	all, err := s.ListAllSandboxDetails(c, adapters.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []adapters.SandboxDetails{
		{Name: `agent "q"`, SandboxID: "sbx-b2", Status: adapters.StatusRunning, StartedAt: 2000, RunID: "sbx-b2"},
		{Name: "ci-job", SandboxID: "sbx-a1", Status: adapters.StatusCompleted, StartedAt: 1000, CompletedAt: 1003, ExecCount: 1, RunID: "run-1"},
	}
	if len(all) != 2 || all[0] != want[0] || all[1] != want[1] {
		t.Fatalf("backfilled details:\n got %+v\nwant %+v", all, want)
	}
	es, err := s.ReadAll(c, `agent "q"`, "sbx-b2")
	if err != nil || len(es) != 2 || es[1].Branch == nil || *es[1].Branch != 1 {
		t.Fatalf("ReadAll = %+v, %v", es, err)
	}
	if env, err := s.GetEnvironment(c, "node-base"); err != nil || env == nil || env.Image != "node:20" {
		t.Fatalf("GetEnvironment = %+v, %v", env, err)
	}
	rows, err := conn.Query(c, `SELECT indexname FROM pg_indexes WHERE tablename = 'alineo_events'`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	ix := map[string]bool{}
	for _, n := range names {
		ix[n] = true
	}
	// The old single-column indexes are kept: the TypeScript SDK's connect()
	// would create them again (a rebuild of each on a large table).
	if !ix["alineo_events_sandbox_id"] || !ix["alineo_events_name"] || !ix["alineo_events_name_sandbox_ts"] || !ix["alineo_events_ledger_seq"] {
		t.Fatalf("indexes = %v; want the composite and ledger_seq ones, and the old ones kept", names)
	}
}

// TestApplyBatchAtomic makes the offset write fail after the rows went in: the
// rows must roll back with it.
func TestApplyBatchAtomic(t *testing.T) {
	dsn := testenv.Postgres(t)
	s := open(t, dsn)
	c := t.Context()
	if _, err := s.Offset(c, "x"); err != nil { // first use: migrate
		t.Fatal(err)
	}
	conn, err := pgx.Connect(c, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(c, `
CREATE FUNCTION poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.consumer = 'poison' THEN RAISE EXCEPTION 'poisoned'; END IF; RETURN NEW; END $$;
CREATE TRIGGER poison BEFORE INSERT ON alineo_projection_offsets FOR EACH ROW EXECUTE FUNCTION poison();`); err != nil {
		t.Fatal(err)
	}
	e := created(1, "n", "id")
	e.Seq = 7
	if err := s.ApplyBatch(c, "poison", []events.Entry{e}, 7); err == nil {
		t.Fatal("ApplyBatch with a failing offset write succeeded")
	}
	if es, err := s.ReadAll(c, "n", "id"); err != nil || len(es) != 0 {
		t.Fatalf("ReadAll = %d entries, %v; want none after the failed batch", len(es), err)
	}
	if d, err := s.GetSandboxDetails(c, "n", "id"); err != nil || d != nil {
		t.Fatalf("GetSandboxDetails = %+v, %v; want nil after the failed batch", d, err)
	}
	if err := s.ApplyBatch(c, "good", []events.Entry{e}, 7); err != nil {
		t.Fatalf("the same entry under another consumer = %v, want it stored", err)
	}
	if es, err := s.ReadAll(c, "n", "id"); err != nil || len(es) != 1 || es[0].Seq != 7 {
		t.Fatalf("ReadAll = %+v, %v; want the entry with Seq 7", es, err)
	}
}

// TestServerHangs freezes the server: a call returns when its ctx ends rather
// than hanging, and the store works again once the server thaws.
func TestServerHangs(t *testing.T) {
	srv := testenv.PostgresServer(t)
	s := open(t, srv.DSN())
	if err := s.Append(t.Context(), created(1, "n", "before")); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = srv.Resume()
		}
	}()
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := s.ReadAll(ctx, "n", "before")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("ReadAll on a frozen server = %v, want context.DeadlineExceeded", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("ReadAll returned %v after its 1s deadline", d)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	testenv.Eventually(t, 15*time.Second, func() error {
		return s.Append(t.Context(), created(2, "n", "after"))
	})
	if es, err := s.ReadAll(t.Context(), "n", "after"); err != nil || len(es) != 1 {
		t.Fatalf("ReadAll after thaw = %d entries, %v; want 1", len(es), err)
	}
}

// TestAppendErrorIsItsOwn: a trigger refuses every row of one session while
// others append at once, in shared transactions; only that session's
// appends fail.
func TestAppendErrorIsItsOwn(t *testing.T) {
	dsn := testenv.Postgres(t)
	s := open(t, dsn)
	c := t.Context()
	if err := s.Append(c, created(1, "n", "first")); err != nil { // first use: migrate
		t.Fatal(err)
	}
	conn, err := pgx.Connect(c, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(c, `
CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN IF NEW.sandbox_id = 'refused' THEN RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$;
CREATE TRIGGER refuse BEFORE INSERT ON alineo_events FOR EACH ROW EXECUTE FUNCTION refuse();`); err != nil {
		t.Fatal(err)
	}
	adaptertest.AppendErrorIsItsOwn(t, s, "refused")
}
