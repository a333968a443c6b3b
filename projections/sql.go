package projections

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/alineo-labs/alineo/events"
)

// Dialect is the SQL flavour of a database/sql target.
type Dialect string

// The dialects SQLHandler speaks.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Rebind rewrites the ? placeholders of q for d ($1, $2… for Postgres). It
// does not look inside string literals: keep literals out of queries with
// placeholders.
func (d Dialect) Rebind(q string) string {
	if d != Postgres || !strings.Contains(q, "?") {
		return q
	}
	var sb strings.Builder
	n := 0
	for _, r := range q {
		if r == '?' {
			n++
			sb.WriteByte('$')
			sb.WriteString(strconv.Itoa(n))
			continue
		}
		sb.WriteRune(r)
	}
	return sb.String()
}

// DefaultOffsetTable is the table SQLHandler keeps offsets in.
const DefaultOffsetTable = "alineo_projection_offsets"

// SQLHandler is a Handler over a database/sql database that is exactly once
// by construction: each batch runs in one transaction that first reads the
// key's offset (a batch at or below it is a redelivery and is skipped, as is
// any entry with Seq at or below it), then calls ApplyTx, then stores the new
// offset. Rows and offset commit together or not at all.
//
// Fill in DB, Dialect and ApplyTx. Safe for concurrent use by different keys.
type SQLHandler struct {
	DB      *sql.DB
	Dialect Dialect
	// OffsetTable holds (key, seq); default alineo_projection_offsets. It is
	// created if missing.
	OffsetTable string
	// Schema runs once, in one transaction, before the first Apply or Offset
	// (CREATE TABLE IF NOT EXISTS …); nil for none.
	Schema func(ctx context.Context, tx *sql.Tx) error
	// ApplyTx writes es (in stream order, each with Seq) inside tx. Return
	// Poison(e.Seq, err) for an entry that can never be applied.
	//
	// ctx is Apply's: it is done when the runtime stops, and ApplyTx should
	// return then (a statement given ctx is interrupted; the transaction is
	// rolled back and never committed).
	//
	// With the modernc.org/sqlite driver, every statement given a ctx that
	// can be cancelled starts a goroutine to watch it and a progress handler
	// in the VM: for a handler of many small statements (an upsert per
	// entry) that is about a sixth of its time. Such a handler can give its
	// statements context.WithoutCancel(ctx) instead: a statement then runs
	// to its end, but the transaction, begun with ctx, is still rolled back
	// when ctx is done and never committed (Commit checks ctx first), so a
	// stop costs at most the statements left in the batch.
	ApplyTx func(ctx context.Context, tx *sql.Tx, es []events.Entry) error

	mu    sync.Mutex
	ready bool
}

var _ Handler = (*SQLHandler)(nil)

// Init creates the offset table and runs Schema; Apply and Offset call it. A
// failed Init is tried again on the next call.
func (h *SQLHandler) Init(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ready {
		return nil
	}
	if h.DB == nil || h.ApplyTx == nil {
		return fmt.Errorf("%w: SQLHandler needs DB and ApplyTx", ErrInvalidConfig)
	}
	if h.Dialect != SQLite && h.Dialect != Postgres {
		return fmt.Errorf("%w: SQL dialect %q", ErrInvalidConfig, h.Dialect)
	}
	if h.OffsetTable == "" {
		h.OffsetTable = DefaultOffsetTable
	}
	err := h.tx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+h.OffsetTable+
			" (key TEXT PRIMARY KEY, seq BIGINT NOT NULL)"); err != nil {
			return err
		}
		if h.Schema != nil {
			return h.Schema(ctx, tx)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("init projection schema: %w", err)
	}
	h.ready = true
	return nil
}

func (h *SQLHandler) tx(ctx context.Context, f func(*sql.Tx) error) error {
	tx, err := h.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := f(tx); err != nil {
		return errors.Join(err, tx.Rollback())
	}
	return tx.Commit()
}

func (h *SQLHandler) offset(ctx context.Context, q interface {
	QueryRowContext(context.Context, string, ...any) *sql.Row
}, key string) (uint64, error) {
	var seq int64
	err := q.QueryRowContext(ctx, h.Dialect.Rebind("SELECT seq FROM "+h.OffsetTable+" WHERE key = ?"), key).Scan(&seq)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, nil
	}
	return uint64(seq), err
}

// Offset returns key's stored offset, 0 if none.
func (h *SQLHandler) Offset(ctx context.Context, key string) (uint64, error) {
	if err := h.Init(ctx); err != nil {
		return 0, err
	}
	return h.offset(ctx, h.DB, key)
}

// Apply applies b in one transaction with its offset, skipping what the
// stored offset says is applied already.
func (h *SQLHandler) Apply(ctx context.Context, b Batch) error {
	if err := h.Init(ctx); err != nil {
		return err
	}
	return h.tx(ctx, func(tx *sql.Tx) error {
		stored, err := h.offset(ctx, tx, b.Key)
		if err != nil {
			return fmt.Errorf("read offset %s: %w", b.Key, err)
		}
		if b.Offset <= stored {
			return nil // a redelivery of a committed batch
		}
		es := b.Entries
		for len(es) > 0 && es[0].Seq <= stored {
			es = es[1:]
		}
		if len(es) > 0 {
			if err := h.ApplyTx(ctx, tx, es); err != nil {
				return err
			}
		}
		_, err = tx.ExecContext(ctx, h.Dialect.Rebind("INSERT INTO "+h.OffsetTable+" (key, seq) VALUES (?, ?) "+
			"ON CONFLICT (key) DO UPDATE SET seq = excluded.seq"), b.Key, int64(b.Offset))
		if err != nil {
			return fmt.Errorf("store offset %s: %w", b.Key, err)
		}
		return nil
	})
}
