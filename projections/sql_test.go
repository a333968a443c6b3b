package projections_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
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
	h := &projections.SQLHandler{DB: db, Dialect: projections.SQLite,
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
