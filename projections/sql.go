package projections

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
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

// LegacyOffsetTable is the offset table every SQLHandler shared before each
// had its own: the name of the product's offset table too (with other
// columns), so a projection in the product's database could not start.
// Init carries its rows over into a handler's own table once.
const LegacyOffsetTable = "alineo_projection_offsets"

// OffsetTableName is the offset table of the projection name by default:
// name_offsets, in lower case, with every character that is not a letter,
// digit or underscore (a '-') made an underscore.
func OffsetTableName(name string) string {
	b := []byte(strings.ToLower(name))
	for i, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			b[i] = '_'
		}
	}
	return string(b) + "_offsets"
}

// SQLHandler is a Handler over a database/sql database that is exactly once
// by construction: each batch runs in one transaction that first reads the
// key's offset (a batch at or below it is a redelivery and is skipped, as is
// any entry with Seq at or below it), then calls ApplyTx, then stores the new
// offset. Rows and offset commit together or not at all.
//
// Fill in DB, Dialect, Name (or OffsetTable) and ApplyTx. Safe for concurrent
// use by different keys.
type SQLHandler struct {
	DB      *sql.DB
	Dialect Dialect
	// Name is the projection's name: the offset table is
	// OffsetTableName(Name) unless OffsetTable is set.
	Name string
	// OffsetTable holds (key, seq): an identifier (letters, digits and
	// underscores). Default OffsetTableName(Name), so each projection has its
	// own, and none is the product's alineo_projection_offsets. It is created
	// if missing; one of another shape fails Init at once with an
	// *OffsetTableError (a Runtime stops on it rather than retrying).
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

// Init creates the offset table (carrying over this database's rows of
// LegacyOffsetTable when it creates it) and runs Schema; Apply and Offset
// call it. A configuration that cannot work, an offset table of another shape
// included, returns an error wrapping ErrInvalidConfig; any other failed Init
// is tried again on the next call.
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
	if h.OffsetTable == "" && h.Name == "" {
		return fmt.Errorf("%w: SQLHandler needs a Name (or an OffsetTable)", ErrInvalidConfig)
	}
	if h.OffsetTable == "" {
		h.OffsetTable = OffsetTableName(h.Name)
	}
	if !identifier(h.OffsetTable) {
		return fmt.Errorf("%w: offset table %q: want letters, digits and underscores", ErrInvalidConfig, h.OffsetTable)
	}
	err := h.tx(ctx, func(tx *sql.Tx) error {
		if err := h.offsetTable(ctx, tx); err != nil {
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

// offsetTable creates the offset table if missing, carrying the legacy
// table's rows over into it, and checks the shape of one that exists.
func (h *SQLHandler) offsetTable(ctx context.Context, tx *sql.Tx) error {
	cols, err := h.columns(ctx, tx, h.OffsetTable)
	if err != nil {
		return fmt.Errorf("read the columns of %s: %w", h.OffsetTable, err)
	}
	if len(cols) > 0 {
		if !slices.Contains(cols, "key") || !slices.Contains(cols, "seq") {
			return &OffsetTableError{Table: h.OffsetTable, Columns: cols}
		}
		return nil
	}
	if _, err := tx.ExecContext(ctx, "CREATE TABLE IF NOT EXISTS "+h.OffsetTable+
		" (key TEXT PRIMARY KEY, seq BIGINT NOT NULL)"); err != nil {
		return err
	}
	if h.OffsetTable == LegacyOffsetTable {
		return nil
	}
	legacy, err := h.columns(ctx, tx, LegacyOffsetTable)
	if err != nil {
		return fmt.Errorf("read the columns of %s: %w", LegacyOffsetTable, err)
	}
	if !slices.Contains(legacy, "key") || !slices.Contains(legacy, "seq") {
		return nil // none, or the product's (consumer, offset)
	}
	// Every key: those of this projection's consumers are among them, and
	// the others are never read (keys are consumer names).
	if _, err := tx.ExecContext(ctx, "INSERT INTO "+h.OffsetTable+" (key, seq) SELECT key, seq FROM "+LegacyOffsetTable); err != nil {
		return fmt.Errorf("carry the offsets of %s over: %w", LegacyOffsetTable, err)
	}
	return nil
}

// columns returns the column names of table, none when it does not exist.
func (h *SQLHandler) columns(ctx context.Context, tx *sql.Tx, table string) ([]string, error) {
	q := `SELECT name FROM pragma_table_info(?)`
	if h.Dialect == Postgres {
		q = `SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = $1`
		table = strings.ToLower(table) // unquoted identifiers are folded
	}
	rows, err := tx.QueryContext(ctx, q, table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var cols []string
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			return nil, err
		}
		cols = append(cols, strings.ToLower(c))
	}
	return cols, rows.Err()
}

// identifier reports whether s is a plain SQL identifier.
func identifier(s string) bool {
	for i, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return s != ""
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
