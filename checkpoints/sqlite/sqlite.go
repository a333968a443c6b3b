package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

var (
	_ checkpoints.Store        = (*Store)(nil)
	_ checkpoints.LeaseBackend = (*Store)(nil)
)

const schema = `
CREATE TABLE IF NOT EXISTS alineo_checkpoints (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	id         TEXT    NOT NULL UNIQUE,
	thread_id  TEXT    NOT NULL,
	parent_id  TEXT    NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	body       TEXT    NOT NULL
);
CREATE INDEX IF NOT EXISTS alineo_checkpoints_thread ON alineo_checkpoints (thread_id, seq);
CREATE TABLE IF NOT EXISTS alineo_checkpoint_heads (
	thread_id TEXT PRIMARY KEY,
	head_id   TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS alineo_checkpoint_leases (
	thread_id   TEXT    PRIMARY KEY,
	owner_token TEXT    NOT NULL,
	fence       INTEGER NOT NULL,
	expires_at  INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS alineo_checkpoint_blob_refs (
	checkpoint_id TEXT    NOT NULL,
	blob_key      TEXT    NOT NULL,
	refs          INTEGER NOT NULL,
	PRIMARY KEY (checkpoint_id, blob_key)
);
CREATE INDEX IF NOT EXISTS alineo_checkpoint_blob_refs_key ON alineo_checkpoint_blob_refs (blob_key);
`

// Store is a checkpoints.Store in a SQLite file. Safe for concurrent use.
type Store struct {
	opts   checkpoints.Options
	w      *sql.DB // one connection, IMMEDIATE transactions
	r      *sql.DB // read pool
	closed atomic.Bool
}

// BusyTimeout is how long a write waits for another writer of the file.
const BusyTimeout = 10 * time.Second

func dsn(path string, immediate bool) string {
	q := url.Values{}
	q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", BusyTimeout.Milliseconds()))
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous(NORMAL)")
	if immediate {
		q.Set("_txlock", "immediate")
	}
	return "file:" + path + "?" + q.Encode()
}

// Open opens (creating if needed) the store in the SQLite file at path and
// migrates its tables. Several processes may open the same file.
func Open(ctx context.Context, path string, opts checkpoints.Options) (*Store, error) {
	w, err := sql.Open("sqlite", dsn(path, true))
	if err != nil {
		return nil, fmt.Errorf("open checkpoint store %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetConnMaxIdleTime(0)
	r, err := sql.Open("sqlite", dsn(path, false))
	if err != nil {
		_ = w.Close()
		return nil, fmt.Errorf("open checkpoint store %s: %w", path, err)
	}
	r.SetMaxOpenConns(4)
	s := &Store{opts: opts.WithDefaults(), w: w, r: r}
	if err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, schema)
		return err
	}); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("migrate checkpoint store %s: %w", path, err)
	}
	return s, nil
}

// Close closes both pools. It is idempotent.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return errors.Join(s.w.Close(), s.r.Close())
}

// write runs fn in one IMMEDIATE transaction and commits it when fn returns nil.
func (s *Store) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if s.closed.Load() {
		return checkpoints.ErrClosed
	}
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func (s *Store) reader() (*sql.DB, error) {
	if s.closed.Load() {
		return nil, checkpoints.ErrClosed
	}
	return s.r, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func getCheckpoint(ctx context.Context, q querier, id string) (*checkpoints.Checkpoint, error) {
	var body string
	err := q.QueryRowContext(ctx, `SELECT body FROM alineo_checkpoints WHERE id = ?`, id).Scan(&body)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get checkpoint %s: %w", id, err)
	}
	return decode(body)
}

func decode(body string) (*checkpoints.Checkpoint, error) {
	var c checkpoints.Checkpoint
	if err := c.UnmarshalJSON([]byte(body)); err != nil {
		return nil, fmt.Errorf("decode checkpoint: %w", err)
	}
	return &c, nil
}

func head(ctx context.Context, q querier, threadID string) (string, error) {
	var h string
	err := q.QueryRowContext(ctx, `SELECT head_id FROM alineo_checkpoint_heads WHERE thread_id = ?`, threadID).Scan(&h)
	if errors.Is(err, sql.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("head of %s: %w", threadID, err)
	}
	return h, nil
}

// Get implements checkpoints.Store.
func (s *Store) Get(ctx context.Context, id string) (*checkpoints.Checkpoint, error) {
	if err := checkpoints.ValidateID("checkpoint id", id); err != nil {
		return nil, err
	}
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	c, err := getCheckpoint(ctx, r, id)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, checkpoints.Errorf(checkpoints.CodeCheckpointNotFound, "checkpoint %q not found", id)
	}
	return c, nil
}

// List implements checkpoints.Store.
func (s *Store) List(ctx context.Context, threadID string) ([]*checkpoints.Checkpoint, error) {
	if err := checkpoints.ValidateID("thread id", threadID); err != nil {
		return nil, err
	}
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	rows, err := r.QueryContext(ctx, `SELECT body FROM alineo_checkpoints WHERE thread_id = ? ORDER BY seq`, threadID)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", threadID, err)
	}
	defer rows.Close()
	var out []*checkpoints.Checkpoint
	for rows.Next() {
		var body string
		if err := rows.Scan(&body); err != nil {
			return nil, fmt.Errorf("list %s: %w", threadID, err)
		}
		c, err := decode(body)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %s: %w", threadID, err)
	}
	return out, nil
}

// Threads implements checkpoints.Store.
func (s *Store) Threads(ctx context.Context) ([]string, error) {
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	rows, err := r.QueryContext(ctx, `SELECT DISTINCT thread_id FROM alineo_checkpoints ORDER BY thread_id`)
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var t string
		if err := rows.Scan(&t); err != nil {
			return nil, fmt.Errorf("list threads: %w", err)
		}
		out = append(out, t)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	return out, nil
}

// Head implements checkpoints.Store.
func (s *Store) Head(ctx context.Context, threadID string) (string, error) {
	if err := checkpoints.ValidateID("thread id", threadID); err != nil {
		return "", err
	}
	r, err := s.reader()
	if err != nil {
		return "", err
	}
	return head(ctx, r, threadID)
}

// checkWriter returns ErrWriterLost unless w holds threadID's live lease.
func (s *Store) checkWriter(ctx context.Context, tx *sql.Tx, threadID string, w checkpoints.Writer) error {
	if w.ThreadID != threadID {
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "writer of thread %q cannot write thread %q", w.ThreadID, threadID)
	}
	var (
		token   string
		fence   int64
		expires int64
	)
	err := tx.QueryRowContext(ctx, `SELECT owner_token, fence, expires_at FROM alineo_checkpoint_leases WHERE thread_id = ?`, threadID).Scan(&token, &fence, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "thread %q has no writer", threadID)
	}
	if err != nil {
		return fmt.Errorf("read lease of %s: %w", threadID, err)
	}
	if token == "" || token != w.OwnerToken || fence != w.Fence {
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "writer (fence %d) of thread %q does not hold the lease", w.Fence, threadID)
	}
	if s.opts.Now().UnixNano() >= expires {
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "lease (fence %d) of thread %q expired", w.Fence, threadID)
	}
	return nil
}

func exists(ctx context.Context, tx *sql.Tx, query string, args ...any) (bool, error) {
	var one int
	err := tx.QueryRowContext(ctx, query, args...).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

func insert(ctx context.Context, tx *sql.Tx, c *checkpoints.Checkpoint) error {
	body, err := c.MarshalJSON() // not json.Marshal, which validates and compacts the output again
	if err != nil {
		return fmt.Errorf("encode checkpoint %s: %w", c.ID, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO alineo_checkpoints (id, thread_id, parent_id, created_at, body) VALUES (?, ?, ?, ?, ?)`,
		c.ID, c.ThreadID, c.ParentID, c.CreatedAt.UnixNano(), string(body)); err != nil {
		return fmt.Errorf("insert checkpoint %s: %w", c.ID, err)
	}
	if _, err := tx.ExecContext(ctx,
		`INSERT INTO alineo_checkpoint_heads (thread_id, head_id) VALUES (?, ?)
		 ON CONFLICT (thread_id) DO UPDATE SET head_id = excluded.head_id`, c.ThreadID, c.ID); err != nil {
		return fmt.Errorf("set head of %s: %w", c.ThreadID, err)
	}
	counts := map[string]int{}
	for _, k := range c.BlobKeys() {
		counts[k]++
	}
	if len(counts) == 0 {
		return nil
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	// Multi-row inserts, within SQLite's limit on bound parameters.
	const rowsPerInsert = 300
	for len(keys) > 0 {
		chunk := keys[:min(rowsPerInsert, len(keys))]
		keys = keys[len(chunk):]
		var q strings.Builder
		q.WriteString(`INSERT INTO alineo_checkpoint_blob_refs (checkpoint_id, blob_key, refs) VALUES `)
		args := make([]any, 0, 3*len(chunk))
		for i, k := range chunk {
			if i > 0 {
				q.WriteString(", ")
			}
			q.WriteString("(?, ?, ?)")
			args = append(args, c.ID, k, counts[k])
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			return fmt.Errorf("insert blob refs of %s: %w", c.ID, err)
		}
	}
	return nil
}

// Append implements checkpoints.Store.
func (s *Store) Append(ctx context.Context, in checkpoints.AppendInput) (string, error) {
	if err := in.Validate(); err != nil {
		return "", err
	}
	c := in.Checkpoint.Clone()
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.checkWriter(ctx, tx, c.ThreadID, in.Writer); err != nil {
			return err
		}
		dup, err := exists(ctx, tx, `SELECT 1 FROM alineo_checkpoints WHERE id = ?`, c.ID)
		if err != nil {
			return err
		}
		if dup {
			return checkpoints.Errorf(checkpoints.CodeDuplicateID, "checkpoint %q already exists", c.ID)
		}
		h, err := head(ctx, tx, c.ThreadID)
		if err != nil {
			return err
		}
		if h != in.ExpectedHead {
			return checkpoints.Errorf(checkpoints.CodeStaleHead, "thread %q head is %q, expected %q", c.ThreadID, h, in.ExpectedHead)
		}
		c.Stamp(s.opts.Now())
		return insert(ctx, tx, c)
	})
	if err != nil {
		return "", err
	}
	return c.ID, nil
}

// DeleteHead implements checkpoints.Store.
func (s *Store) DeleteHead(ctx context.Context, in checkpoints.DeleteHeadInput) error {
	if err := in.Validate(); err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := s.checkWriter(ctx, tx, in.ThreadID, in.Writer); err != nil {
			return err
		}
		var thread, parent string
		err := tx.QueryRowContext(ctx, `SELECT thread_id, parent_id FROM alineo_checkpoints WHERE id = ?`, in.CheckpointID).Scan(&thread, &parent)
		if errors.Is(err, sql.ErrNoRows) {
			return checkpoints.Errorf(checkpoints.CodeCheckpointNotFound, "checkpoint %q not found", in.CheckpointID)
		}
		if err != nil {
			return fmt.Errorf("read checkpoint %s: %w", in.CheckpointID, err)
		}
		h, err := head(ctx, tx, in.ThreadID)
		if err != nil {
			return err
		}
		if thread != in.ThreadID || h != in.CheckpointID {
			return checkpoints.Errorf(checkpoints.CodeNotHead, "checkpoint %q is not the head of thread %q", in.CheckpointID, in.ThreadID)
		}
		return remove(ctx, tx, in.ThreadID, in.CheckpointID, parent, true)
	})
}

// remove deletes checkpoint id of thread with its references and, if isHead,
// moves the head to parent.
func remove(ctx context.Context, tx *sql.Tx, thread, id, parent string, isHead bool) error {
	if _, err := tx.ExecContext(ctx, `DELETE FROM alineo_checkpoints WHERE id = ?`, id); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", id, err)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM alineo_checkpoint_blob_refs WHERE checkpoint_id = ?`, id); err != nil {
		return fmt.Errorf("delete blob refs of %s: %w", id, err)
	}
	if !isHead {
		return nil
	}
	var err error
	if parent == "" {
		_, err = tx.ExecContext(ctx, `DELETE FROM alineo_checkpoint_heads WHERE thread_id = ?`, thread)
	} else {
		_, err = tx.ExecContext(ctx, `UPDATE alineo_checkpoint_heads SET head_id = ? WHERE thread_id = ?`, parent, thread)
	}
	if err != nil {
		return fmt.Errorf("move head of %s: %w", thread, err)
	}
	return nil
}

// DeleteCheckpoint implements checkpoints.Store.
func (s *Store) DeleteCheckpoint(ctx context.Context, in checkpoints.DeleteHeadInput) error {
	if err := in.Validate(); err != nil {
		return err
	}
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := s.checkWriter(ctx, tx, in.ThreadID, in.Writer); err != nil {
			return err
		}
		var parent string
		err := tx.QueryRowContext(ctx, `SELECT parent_id FROM alineo_checkpoints WHERE id = ? AND thread_id = ?`, in.CheckpointID, in.ThreadID).Scan(&parent)
		if errors.Is(err, sql.ErrNoRows) {
			return checkpoints.Errorf(checkpoints.CodeCheckpointNotFound, "checkpoint %q not found in thread %q", in.CheckpointID, in.ThreadID)
		}
		if err != nil {
			return fmt.Errorf("read checkpoint %s: %w", in.CheckpointID, err)
		}
		h, err := head(ctx, tx, in.ThreadID)
		if err != nil {
			return err
		}
		// Re-parent the children: the parent id lives in the column and the body.
		rows, err := tx.QueryContext(ctx, `SELECT body FROM alineo_checkpoints WHERE parent_id = ? AND thread_id = ?`, in.CheckpointID, in.ThreadID)
		if err != nil {
			return fmt.Errorf("read children of %s: %w", in.CheckpointID, err)
		}
		var children []*checkpoints.Checkpoint
		for rows.Next() {
			var body string
			if err := rows.Scan(&body); err != nil {
				rows.Close()
				return fmt.Errorf("read children of %s: %w", in.CheckpointID, err)
			}
			c, err := decode(body)
			if err != nil {
				rows.Close()
				return err
			}
			children = append(children, c)
		}
		if err := rows.Close(); err != nil {
			return err
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read children of %s: %w", in.CheckpointID, err)
		}
		for _, c := range children {
			c.ParentID = parent
			body, err := c.MarshalJSON() // not json.Marshal, which validates and compacts the output again
			if err != nil {
				return fmt.Errorf("encode checkpoint %s: %w", c.ID, err)
			}
			if _, err := tx.ExecContext(ctx, `UPDATE alineo_checkpoints SET parent_id = ?, body = ? WHERE id = ?`, parent, string(body), c.ID); err != nil {
				return fmt.Errorf("re-parent %s: %w", c.ID, err)
			}
		}
		return remove(ctx, tx, in.ThreadID, in.CheckpointID, parent, h == in.CheckpointID)
	})
}

// AcquireWriter implements checkpoints.Store.
func (s *Store) AcquireWriter(ctx context.Context, threadID string) (*checkpoints.Lease, error) {
	if err := checkpoints.ValidateID("thread id", threadID); err != nil {
		return nil, err
	}
	var (
		w       checkpoints.Writer
		expires time.Time
	)
	err := s.write(ctx, func(tx *sql.Tx) error {
		now := s.opts.Now()
		var (
			token     string
			fence, ex int64
		)
		err := tx.QueryRowContext(ctx, `SELECT owner_token, fence, expires_at FROM alineo_checkpoint_leases WHERE thread_id = ?`, threadID).Scan(&token, &fence, &ex)
		switch {
		case errors.Is(err, sql.ErrNoRows):
			fence = 0
		case err != nil:
			return fmt.Errorf("read lease of %s: %w", threadID, err)
		case token != "" && now.UnixNano() < ex:
			return checkpoints.Errorf(checkpoints.CodeWriterConflict, "thread %q has a live writer (fence %d)", threadID, fence)
		}
		w = checkpoints.Writer{ThreadID: threadID, OwnerToken: checkpoints.NewToken(), Fence: fence + 1}
		expires = checkpoints.Normalize(now.Add(s.opts.LeaseDuration))
		_, err = tx.ExecContext(ctx,
			`INSERT INTO alineo_checkpoint_leases (thread_id, owner_token, fence, expires_at) VALUES (?, ?, ?, ?)
			 ON CONFLICT (thread_id) DO UPDATE SET owner_token = excluded.owner_token, fence = excluded.fence, expires_at = excluded.expires_at`,
			threadID, w.OwnerToken, w.Fence, expires.UnixNano())
		if err != nil {
			return fmt.Errorf("write lease of %s: %w", threadID, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return checkpoints.NewLease(w, expires, s.opts.RenewAfter, s), nil
}

// RenewLease implements checkpoints.LeaseBackend.
func (s *Store) RenewLease(ctx context.Context, w checkpoints.Writer) (time.Time, error) {
	var expires time.Time
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.checkWriter(ctx, tx, w.ThreadID, w); err != nil {
			return err
		}
		expires = checkpoints.Normalize(s.opts.Now().Add(s.opts.LeaseDuration))
		if _, err := tx.ExecContext(ctx, `UPDATE alineo_checkpoint_leases SET expires_at = ? WHERE thread_id = ?`, expires.UnixNano(), w.ThreadID); err != nil {
			return fmt.Errorf("renew lease of %s: %w", w.ThreadID, err)
		}
		return nil
	})
	return expires, err
}

// ReleaseLease implements checkpoints.LeaseBackend. The row stays, with no
// owner, so the next fence is greater.
func (s *Store) ReleaseLease(ctx context.Context, w checkpoints.Writer) error {
	return s.write(ctx, func(tx *sql.Tx) error {
		if err := s.checkWriter(ctx, tx, w.ThreadID, w); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE alineo_checkpoint_leases SET owner_token = '' WHERE thread_id = ?`, w.ThreadID); err != nil {
			return fmt.Errorf("release lease of %s: %w", w.ThreadID, err)
		}
		return nil
	})
}

// ListBlobReferences implements checkpoints.Store.
func (s *Store) ListBlobReferences(ctx context.Context) ([]checkpoints.BlobRef, error) {
	r, err := s.reader()
	if err != nil {
		return nil, err
	}
	rows, err := r.QueryContext(ctx, `SELECT blob_key, SUM(refs) FROM alineo_checkpoint_blob_refs GROUP BY blob_key ORDER BY blob_key`)
	if err != nil {
		return nil, fmt.Errorf("list blob references: %w", err)
	}
	defer rows.Close()
	var out []checkpoints.BlobRef
	for rows.Next() {
		var ref checkpoints.BlobRef
		if err := rows.Scan(&ref.Key, &ref.References); err != nil {
			return nil, fmt.Errorf("list blob references: %w", err)
		}
		out = append(out, ref)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list blob references: %w", err)
	}
	return out, nil
}

// ForkFromCheckpoint implements checkpoints.Store.
func (s *Store) ForkFromCheckpoint(ctx context.Context, in checkpoints.ForkInput) (*checkpoints.Checkpoint, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	var out *checkpoints.Checkpoint
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := s.checkWriter(ctx, tx, in.DestinationThreadID, in.Writer); err != nil {
			return err
		}
		src, err := getCheckpoint(ctx, tx, in.SourceCheckpointID)
		if err != nil {
			return err
		}
		if src == nil {
			return checkpoints.Errorf(checkpoints.CodeForkSourceNotFound, "fork source %q not found", in.SourceCheckpointID)
		}
		if src.ThreadID != in.SourceThreadID {
			return checkpoints.Errorf(checkpoints.CodeForkSourceThreadMismatch, "fork source %q belongs to thread %q, not %q", src.ID, src.ThreadID, in.SourceThreadID)
		}
		busy, err := exists(ctx, tx, `SELECT 1 FROM alineo_checkpoint_heads WHERE thread_id = ?1
			UNION ALL SELECT 1 FROM alineo_checkpoints WHERE thread_id = ?1 LIMIT 1`, in.DestinationThreadID)
		if err != nil {
			return fmt.Errorf("check fork destination %s: %w", in.DestinationThreadID, err)
		}
		if busy {
			return checkpoints.Errorf(checkpoints.CodeForkDestinationNotEmpty, "fork destination thread %q is not empty", in.DestinationThreadID)
		}
		dup, err := exists(ctx, tx, `SELECT 1 FROM alineo_checkpoints WHERE id = ?`, in.DestinationCheckpointID)
		if err != nil {
			return err
		}
		if dup {
			return checkpoints.Errorf(checkpoints.CodeDuplicateID, "checkpoint %q already exists", in.DestinationCheckpointID)
		}
		out = checkpoints.ForkRoot(src, in, s.opts.Now())
		return insert(ctx, tx, out)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}
