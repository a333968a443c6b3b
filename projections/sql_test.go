package projections_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
)

// TestSQLHandlerCancelledNeverCommits: ApplyTx sees Apply's cancellation (a
// handler waiting on ctx returns when the runtime stops), and a batch whose
// ctx ends while it is applied is not committed: neither its rows nor its
// offset, and the next Apply applies it whole. So too when ApplyTx gives its
// statements context.WithoutCancel(ctx), as ApplyTx's doc suggests.
func TestSQLHandlerCancelledNeverCommits(t *testing.T) {
	t.Run("statements given ctx", func(t *testing.T) { cancelledNeverCommits(t, false) })
	t.Run("statements not cancelled", func(t *testing.T) { cancelledNeverCommits(t, true) })
}

func cancelledNeverCommits(t *testing.T, uncancelled bool) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "p.db")+"?_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	var cancelMidway context.CancelFunc
	var sawCancel bool
	h := &projections.SQLHandler{DB: db, Dialect: projections.SQLite, Name: "cancel",
		Schema: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE rows (seq INTEGER PRIMARY KEY)`)
			return err
		},
		ApplyTx: func(ctx context.Context, tx *sql.Tx, es []events.Entry) error {
			sctx := ctx
			if uncancelled {
				sctx = context.WithoutCancel(ctx)
			}
			for i, e := range es {
				if i == 1 && cancelMidway != nil {
					cancelMidway()
					sawCancel = ctx.Err() != nil
				}
				if _, err := tx.ExecContext(sctx, `INSERT INTO rows (seq) VALUES (?)`, int64(e.Seq)); err != nil {
					return err
				}
			}
			return nil
		}}
	es := []events.Entry{{Seq: 1}, {Seq: 2}, {Seq: 3}}
	ctx, cancel := context.WithCancel(context.Background())
	cancelMidway = cancel
	if err := h.Apply(ctx, projections.Batch{Key: "k", Entries: es, Offset: 3}); err == nil {
		t.Fatal("Apply with its ctx cancelled midway = nil, want an error")
	}
	if !sawCancel {
		t.Fatal("ApplyTx's ctx was not done after Apply's ctx was cancelled")
	}
	count := func() (n int) {
		if err := db.QueryRow(`SELECT count(*) FROM rows`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	if got := count(); got != 0 {
		t.Fatalf("rows after a cancelled Apply = %d, want 0", got)
	}
	if off, err := h.Offset(context.Background(), "k"); err != nil || off != 0 {
		t.Fatalf("offset after a cancelled Apply = %d, %v; want 0", off, err)
	}
	cancelMidway = nil
	if err := h.Apply(context.Background(), projections.Batch{Key: "k", Entries: es, Offset: 3}); err != nil {
		t.Fatal(err)
	}
	if got, want := count(), 3; got != want {
		t.Fatalf("rows = %d, want %d", got, want)
	}
	if off, err := h.Offset(context.Background(), "k"); err != nil || off != 3 {
		t.Fatalf("offset = %d, %v; want 3", off, err)
	}
}

func openSQLite(t *testing.T) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "p.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// countingHandler counts the entries it applies in the table <name>_rows.
func countingHandler(db *sql.DB, name string) *projections.SQLHandler {
	return &projections.SQLHandler{DB: db, Dialect: projections.SQLite, Name: name,
		Schema: func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS `+strings.ReplaceAll(name, "-", "_")+`_rows (seq INTEGER PRIMARY KEY)`)
			return err
		},
		ApplyTx: func(ctx context.Context, tx *sql.Tx, es []events.Entry) error {
			for _, e := range es {
				if _, err := tx.ExecContext(ctx, `INSERT INTO `+strings.ReplaceAll(name, "-", "_")+`_rows (seq) VALUES (?)`, int64(e.Seq)); err != nil {
					return err
				}
			}
			return nil
		}}
}

// TestSQLHandlerOwnOffsetTable (issue 40 item 2): each projection keeps its
// offsets in a table of its own, named after it, so two projections and the
// product's tables share a database; a consumer key of the same name in two
// projections does not mix.
func TestSQLHandlerOwnOffsetTable(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	// The product's offset table, as adapters/sqlite creates it.
	if _, err := db.Exec(`CREATE TABLE alineo_projection_offsets (consumer TEXT PRIMARY KEY, "offset" INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	a, b := countingHandler(db, "stats"), countingHandler(db, "my-audit")
	if err := a.Apply(ctx, projections.Batch{Key: "k", Entries: []events.Entry{{Seq: 1}, {Seq: 2}}, Offset: 2}); err != nil {
		t.Fatalf("apply a: %v", err)
	}
	if err := b.Apply(ctx, projections.Batch{Key: "k", Entries: []events.Entry{{Seq: 5}}, Offset: 5}); err != nil {
		t.Fatalf("apply b: %v", err)
	}
	for h, want := range map[*projections.SQLHandler]uint64{a: 2, b: 5} {
		if off, err := h.Offset(ctx, "k"); err != nil || off != want {
			t.Errorf("%s: offset = %d, %v; want %d", h.Name, off, err, want)
		}
	}
	if got, want := a.OffsetTable, "stats_offsets"; got != want {
		t.Errorf("offset table = %q, want %q", got, want)
	}
	if got, want := b.OffsetTable, "my_audit_offsets"; got != want {
		t.Errorf("offset table = %q, want %q", got, want)
	}
	for _, bad := range []*projections.SQLHandler{
		{DB: db, Dialect: projections.SQLite, ApplyTx: a.ApplyTx},                                 // no name
		{DB: db, Dialect: projections.SQLite, ApplyTx: a.ApplyTx, OffsetTable: "x; DROP TABLE y"}, // not an identifier
	} {
		if err := bad.Init(ctx); !errors.Is(err, projections.ErrInvalidConfig) {
			t.Errorf("Init(%+v) = %v, want ErrInvalidConfig", bad, err)
		}
	}
}

// TestSQLHandlerCarriesLegacyOffsets: a projection that kept its offsets in
// the shared alineo_projection_offsets (key, seq) of earlier releases goes on
// from them in its own table, instead of applying its history again.
func TestSQLHandlerCarriesLegacyOffsets(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	if _, err := db.Exec(`CREATE TABLE alineo_projection_offsets (key TEXT PRIMARY KEY, seq BIGINT NOT NULL);
		INSERT INTO alineo_projection_offsets VALUES ('stats', 42), ('stats-p1-of-2', 40)`); err != nil {
		t.Fatal(err)
	}
	h := countingHandler(db, "stats")
	for key, want := range map[string]uint64{"stats": 42, "stats-p1-of-2": 40, "other": 0} {
		if off, err := h.Offset(ctx, key); err != nil || off != want {
			t.Errorf("offset %s = %d, %v; want %d", key, off, err, want)
		}
	}
	// Carried once: a later change of the legacy table is not its business.
	if _, err := db.Exec(`UPDATE alineo_projection_offsets SET seq = 1`); err != nil {
		t.Fatal(err)
	}
	again := countingHandler(db, "stats")
	if off, err := again.Offset(ctx, "stats"); err != nil || off != 42 {
		t.Errorf("offset after a second Init = %d, %v; want 42", off, err)
	}
}

// TestSQLHandlerWrongShapeFailsAtOnce: an offset table of another shape (the
// product's, named explicitly) fails Init with an *OffsetTableError, and a
// Runtime on it returns that error instead of retrying for ever.
func TestSQLHandlerWrongShapeFailsAtOnce(t *testing.T) {
	ctx := context.Background()
	db := openSQLite(t)
	if _, err := db.Exec(`CREATE TABLE alineo_projection_offsets (consumer TEXT PRIMARY KEY, "offset" INTEGER NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	h := countingHandler(db, "stats")
	h.OffsetTable = "alineo_projection_offsets"
	err := h.Init(ctx)
	var ote *projections.OffsetTableError
	if !errors.As(err, &ote) || !errors.Is(err, projections.ErrInvalidConfig) || ote.Table != "alineo_projection_offsets" ||
		!slices.Equal(ote.Columns, []string{"consumer", "offset"}) {
		t.Fatalf("Init = %v, want an *OffsetTableError naming the table and its columns", err)
	}
	b := projectiontest.Bus(t)
	projectiontest.Publish(t, b, projectiontest.History(1, 1, 2))
	r := &projections.Runtime{Bus: b, Handler: h, Name: "stats", MaxBackoff: 50 * time.Millisecond}
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = r.Run(rctx)
	if !errors.As(err, &ote) {
		t.Fatalf("Run = %v, want the *OffsetTableError", err)
	}
	if rctx.Err() != nil {
		t.Fatal("Run retried until its ctx ended")
	}
	if got := r.Progress().Errors; got != 0 {
		t.Errorf("Run counted %d retried errors, want 0", got)
	}
}
