package postgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"sort"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/alineo-labs/alineo/checkpoints"
)

var (
	_ checkpoints.Store        = (*Store)(nil)
	_ checkpoints.LeaseBackend = (*Store)(nil)
)

// Store is a checkpoints.Store in a Postgres database. Safe for concurrent
// use, by several Stores and processes on one database too.
type Store struct {
	opts   checkpoints.Options
	pool   *pgxpool.Pool
	closed atomic.Bool
}

// ConnectTimeout bounds each connection attempt unless the DSN sets
// connect_timeout.
const ConnectTimeout = 5 * time.Second

// idleTxParam is the server setting that ends a session left idle inside a
// transaction.
const idleTxParam = "idle_in_transaction_session_timeout"

// Open connects to the database at dsn (a postgres:// URL or key=value
// string; $DATABASE_URL when empty), checks that it answers and migrates the
// tables. Pool settings come from the DSN (pool_max_conns, ...). A DSN that
// does not parse gives an error wrapping ErrInvalidConfig; a server that does
// not answer gives the cause. Errors name the server with the password
// elided.
func Open(ctx context.Context, dsn string, opts checkpoints.Options) (*Store, error) {
	if dsn == "" {
		dsn = os.Getenv("DATABASE_URL")
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint store %s: %w: %w", Redact(dsn), ErrInvalidConfig, err)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = ConnectTimeout
	}
	opts = opts.WithDefaults()
	if _, ok := cfg.ConnConfig.RuntimeParams[idleTxParam]; !ok {
		// A process stopped (SIGSTOP, a hung host) inside a write
		// transaction keeps its thread's lease row locked; the server ends
		// such a session after a lease duration, so the thread can be taken
		// over as if the holder's lease had simply expired.
		cfg.ConnConfig.RuntimeParams[idleTxParam] = strconv.FormatInt(max(opts.LeaseDuration.Milliseconds(), 1000), 10)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open checkpoint store %s: %w", Redact(dsn), err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("open checkpoint store %s: %w", Redact(dsn), err)
	}
	if err := migrate(ctx, pool); err != nil {
		pool.Close()
		return nil, fmt.Errorf("migrate checkpoint store %s: %w", Redact(dsn), err)
	}
	return &Store{opts: opts, pool: pool}, nil
}

// Redact returns dsn with its password replaced by "xxxxx", for messages. A
// key=value DSN, which Redact does not parse, is reduced to "(dsn)".
func Redact(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		if dsn == "" {
			return "(default dsn)"
		}
		return "(dsn)"
	}
	return u.Redacted()
}

// Close closes the pool. It is idempotent.
func (s *Store) Close() error {
	if !s.closed.Swap(true) {
		s.pool.Close()
	}
	return nil
}

func (s *Store) db() (*pgxpool.Pool, error) {
	if s.closed.Load() {
		return nil, checkpoints.ErrClosed
	}
	return s.pool, nil
}

// write runs fn in one transaction and commits it when fn returns nil.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	p, err := s.db()
	if err != nil {
		return err
	}
	err = pgx.BeginFunc(ctx, p, fn)
	var ce *checkpoints.Error
	if err == nil || errors.As(err, &ce) {
		return err
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == "23505" && pe.ConstraintName == "alineo_checkpoints_id_key" {
		// Another writer (of another thread) inserted the id first.
		return &checkpoints.Error{Code: checkpoints.CodeDuplicateID, Message: "checkpoint id already exists", Err: err}
	}
	if s.closed.Load() {
		return fmt.Errorf("%w: %w", checkpoints.ErrClosed, err)
	}
	return err
}

func decode(body string) (*checkpoints.Checkpoint, error) {
	var c checkpoints.Checkpoint
	if err := c.UnmarshalJSON([]byte(body)); err != nil {
		return nil, fmt.Errorf("decode checkpoint: %w", err)
	}
	return &c, nil
}

// getCheckpoint returns checkpoint id, or nil when there is none.
func getCheckpoint(ctx context.Context, q pgxQuerier, id string) (*checkpoints.Checkpoint, error) {
	var body string
	err := q.QueryRow(ctx, `SELECT body FROM alineo_checkpoints WHERE id = $1`, id).Scan(&body)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("get checkpoint %s: %w", id, err)
	}
	return decode(body)
}

type pgxQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

func head(ctx context.Context, q pgxQuerier, threadID string) (string, error) {
	var h string
	err := q.QueryRow(ctx, `SELECT head_id FROM alineo_checkpoint_heads WHERE thread_id = $1`, threadID).Scan(&h)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("read head of %s: %w", threadID, err)
	}
	return h, nil
}

// Get implements checkpoints.Store.
func (s *Store) Get(ctx context.Context, id string) (_ *checkpoints.Checkpoint, err error) {
	defer markUnavailable(&err)
	if err := checkpoints.ValidateID("checkpoint id", id); err != nil {
		return nil, err
	}
	p, err := s.db()
	if err != nil {
		return nil, err
	}
	c, err := getCheckpoint(ctx, p, id)
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, checkpoints.Errorf(checkpoints.CodeCheckpointNotFound, "checkpoint %q not found", id)
	}
	return c, nil
}

// List implements checkpoints.Store.
func (s *Store) List(ctx context.Context, threadID string) (_ []*checkpoints.Checkpoint, err error) {
	defer markUnavailable(&err)
	if err := checkpoints.ValidateID("thread id", threadID); err != nil {
		return nil, err
	}
	p, err := s.db()
	if err != nil {
		return nil, err
	}
	rows, err := p.Query(ctx, `SELECT body FROM alineo_checkpoints WHERE thread_id = $1 ORDER BY seq`, threadID)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", threadID, err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", threadID, err)
	}
	out := make([]*checkpoints.Checkpoint, 0, len(bodies))
	for _, b := range bodies {
		c, err := decode(b)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// Threads implements checkpoints.Store.
func (s *Store) Threads(ctx context.Context) (_ []string, err error) {
	defer markUnavailable(&err)
	p, err := s.db()
	if err != nil {
		return nil, err
	}
	rows, err := p.Query(ctx, `SELECT DISTINCT thread_id FROM alineo_checkpoints ORDER BY thread_id`)
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("list threads: %w", err)
	}
	return out, nil
}

// Head implements checkpoints.Store.
func (s *Store) Head(ctx context.Context, threadID string) (_ string, err error) {
	defer markUnavailable(&err)
	if err := checkpoints.ValidateID("thread id", threadID); err != nil {
		return "", err
	}
	p, err := s.db()
	if err != nil {
		return "", err
	}
	return head(ctx, p, threadID)
}

// lockWriter locks threadID's lease row for the rest of tx and returns
// ErrWriterLost unless w holds the live lease. Every write of the thread
// starts here, so writes of one thread run one at a time whichever store
// makes them.
func (s *Store) lockWriter(ctx context.Context, tx pgx.Tx, threadID string, w checkpoints.Writer) error {
	if w.ThreadID != threadID {
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "writer of thread %q cannot write thread %q", w.ThreadID, threadID)
	}
	var (
		token          string
		fence, expires int64
	)
	err := tx.QueryRow(ctx, `SELECT owner_token, fence, expires_at FROM alineo_checkpoint_leases WHERE thread_id = $1 FOR UPDATE`,
		threadID).Scan(&token, &fence, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "thread %q has no writer", threadID)
	}
	if err != nil {
		return fmt.Errorf("lock lease of %s: %w", threadID, err)
	}
	if token == "" || token != w.OwnerToken || fence != w.Fence {
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "writer (fence %d) of thread %q does not hold the lease", w.Fence, threadID)
	}
	if s.opts.Now().UnixNano() >= expires {
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "lease (fence %d) of thread %q expired", w.Fence, threadID)
	}
	return nil
}

// insert adds c, makes it its thread's head and records its blob references,
// in one round trip.
func insert(ctx context.Context, tx pgx.Tx, c *checkpoints.Checkpoint) error {
	body, err := c.MarshalJSON() // not json.Marshal, which validates and compacts the output again
	if err != nil {
		return fmt.Errorf("encode checkpoint %s: %w", c.ID, err)
	}
	counts := map[string]int32{}
	for _, k := range c.BlobKeys() {
		counts[k]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	refs := make([]int32, len(keys))
	for i, k := range keys {
		refs[i] = counts[k]
	}
	b := &pgx.Batch{}
	b.Queue(`INSERT INTO alineo_checkpoints (id, thread_id, parent_id, created_at, body) VALUES ($1, $2, $3, $4, $5)`,
		c.ID, c.ThreadID, c.ParentID, c.CreatedAt.UnixNano(), string(body))
	b.Queue(`INSERT INTO alineo_checkpoint_heads (thread_id, head_id) VALUES ($1, $2)
		ON CONFLICT (thread_id) DO UPDATE SET head_id = excluded.head_id`, c.ThreadID, c.ID)
	if len(keys) > 0 {
		b.Queue(`INSERT INTO alineo_checkpoint_blob_refs (checkpoint_id, blob_key, refs)
			SELECT $1, k, n FROM unnest($2::text[], $3::int[]) AS r(k, n)`, c.ID, keys, refs)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("insert checkpoint %s: %w", c.ID, err)
	}
	return nil
}

// Append implements checkpoints.Store.
func (s *Store) Append(ctx context.Context, in checkpoints.AppendInput) (_ string, err error) {
	defer markUnavailable(&err)
	if err := in.Validate(); err != nil {
		return "", err
	}
	c := in.Checkpoint.Clone()
	err = s.write(ctx, func(tx pgx.Tx) error {
		if err := s.lockWriter(ctx, tx, c.ThreadID, in.Writer); err != nil {
			return err
		}
		var (
			h   *string
			dup bool
		)
		if err := tx.QueryRow(ctx, `SELECT (SELECT head_id FROM alineo_checkpoint_heads WHERE thread_id = $1),
			EXISTS (SELECT 1 FROM alineo_checkpoints WHERE id = $2)`, c.ThreadID, c.ID).Scan(&h, &dup); err != nil {
			return fmt.Errorf("read head of %s: %w", c.ThreadID, err)
		}
		if dup {
			return checkpoints.Errorf(checkpoints.CodeDuplicateID, "checkpoint %q already exists", c.ID)
		}
		if got := deref(h); got != in.ExpectedHead {
			return checkpoints.Errorf(checkpoints.CodeStaleHead, "thread %q head is %q, expected %q", c.ThreadID, got, in.ExpectedHead)
		}
		c.Stamp(s.opts.Now())
		return insert(ctx, tx, c)
	})
	if err != nil {
		return "", err
	}
	return c.ID, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// DeleteHead implements checkpoints.Store.
func (s *Store) DeleteHead(ctx context.Context, in checkpoints.DeleteHeadInput) (err error) {
	defer markUnavailable(&err)
	if err := in.Validate(); err != nil {
		return err
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		if err := s.lockWriter(ctx, tx, in.ThreadID, in.Writer); err != nil {
			return err
		}
		var thread, parent string
		err := tx.QueryRow(ctx, `SELECT thread_id, parent_id FROM alineo_checkpoints WHERE id = $1`, in.CheckpointID).Scan(&thread, &parent)
		if errors.Is(err, pgx.ErrNoRows) {
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
func remove(ctx context.Context, tx pgx.Tx, thread, id, parent string, isHead bool) error {
	b := &pgx.Batch{}
	b.Queue(`DELETE FROM alineo_checkpoints WHERE id = $1`, id)
	b.Queue(`DELETE FROM alineo_checkpoint_blob_refs WHERE checkpoint_id = $1`, id)
	switch {
	case !isHead:
	case parent == "":
		b.Queue(`DELETE FROM alineo_checkpoint_heads WHERE thread_id = $1`, thread)
	default:
		b.Queue(`UPDATE alineo_checkpoint_heads SET head_id = $1 WHERE thread_id = $2`, parent, thread)
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("delete checkpoint %s: %w", id, err)
	}
	return nil
}

// DeleteCheckpoint implements checkpoints.Store.
func (s *Store) DeleteCheckpoint(ctx context.Context, in checkpoints.DeleteHeadInput) (err error) {
	defer markUnavailable(&err)
	if err := in.Validate(); err != nil {
		return err
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		if err := s.lockWriter(ctx, tx, in.ThreadID, in.Writer); err != nil {
			return err
		}
		var parent string
		err := tx.QueryRow(ctx, `SELECT parent_id FROM alineo_checkpoints WHERE id = $1 AND thread_id = $2`,
			in.CheckpointID, in.ThreadID).Scan(&parent)
		if errors.Is(err, pgx.ErrNoRows) {
			return checkpoints.Errorf(checkpoints.CodeCheckpointNotFound, "checkpoint %q not found in thread %q", in.CheckpointID, in.ThreadID)
		}
		if err != nil {
			return fmt.Errorf("read checkpoint %s: %w", in.CheckpointID, err)
		}
		h, err := head(ctx, tx, in.ThreadID)
		if err != nil {
			return err
		}
		if err := reparent(ctx, tx, in.ThreadID, in.CheckpointID, parent); err != nil {
			return err
		}
		return remove(ctx, tx, in.ThreadID, in.CheckpointID, parent, h == in.CheckpointID)
	})
}

// reparent gives id's children (in thread) parent as their parent, in the
// column and in the body.
func reparent(ctx context.Context, tx pgx.Tx, thread, id, parent string) error {
	rows, err := tx.Query(ctx, `SELECT body FROM alineo_checkpoints WHERE thread_id = $1 AND parent_id = $2`, thread, id)
	if err != nil {
		return fmt.Errorf("read children of %s: %w", id, err)
	}
	bodies, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("read children of %s: %w", id, err)
	}
	b := &pgx.Batch{}
	for _, body := range bodies {
		c, err := decode(body)
		if err != nil {
			return err
		}
		c.ParentID = parent
		nb, err := c.MarshalJSON() // not json.Marshal, which validates and compacts the output again
		if err != nil {
			return fmt.Errorf("encode checkpoint %s: %w", c.ID, err)
		}
		b.Queue(`UPDATE alineo_checkpoints SET parent_id = $1, body = $2 WHERE id = $3`, parent, string(nb), c.ID)
	}
	if b.Len() == 0 {
		return nil
	}
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return fmt.Errorf("re-parent children of %s: %w", id, err)
	}
	return nil
}

// AcquireWriter implements checkpoints.Store. One upsert takes the lease when
// the thread has none, or its lease was released or expired, raising the
// fence; it returns no row while another lease is live.
func (s *Store) AcquireWriter(ctx context.Context, threadID string) (_ *checkpoints.Lease, err error) {
	defer markUnavailable(&err)
	if err := checkpoints.ValidateID("thread id", threadID); err != nil {
		return nil, err
	}
	p, err := s.db()
	if err != nil {
		return nil, err
	}
	now := s.opts.Now()
	w := checkpoints.Writer{ThreadID: threadID, OwnerToken: checkpoints.NewToken()}
	expires := checkpoints.Normalize(now.Add(s.opts.LeaseDuration))
	err = p.QueryRow(ctx, `INSERT INTO alineo_checkpoint_leases AS l (thread_id, owner_token, fence, expires_at) VALUES ($1, $2, 1, $3)
		ON CONFLICT (thread_id) DO UPDATE SET owner_token = excluded.owner_token, fence = l.fence + 1, expires_at = excluded.expires_at
		WHERE l.owner_token = '' OR l.expires_at <= $4
		RETURNING fence`, threadID, w.OwnerToken, expires.UnixNano(), now.UnixNano()).Scan(&w.Fence)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, checkpoints.Errorf(checkpoints.CodeWriterConflict, "thread %q has a live writer", threadID)
	}
	if err != nil {
		if s.closed.Load() {
			err = fmt.Errorf("%w: %w", checkpoints.ErrClosed, err)
		}
		return nil, fmt.Errorf("acquire writer of %s: %w", threadID, err)
	}
	return checkpoints.NewLease(w, expires, s.opts.RenewAfter, s), nil
}

// RenewLease implements checkpoints.LeaseBackend.
func (s *Store) RenewLease(ctx context.Context, w checkpoints.Writer) (_ time.Time, err error) {
	defer markUnavailable(&err)
	if err := checkpoints.ValidateID("thread id", w.ThreadID); err != nil {
		return time.Time{}, err
	}
	var expires time.Time
	err = s.write(ctx, func(tx pgx.Tx) error {
		if err := s.lockWriter(ctx, tx, w.ThreadID, w); err != nil {
			return err
		}
		expires = checkpoints.Normalize(s.opts.Now().Add(s.opts.LeaseDuration))
		if _, err := tx.Exec(ctx, `UPDATE alineo_checkpoint_leases SET expires_at = $1 WHERE thread_id = $2`, expires.UnixNano(), w.ThreadID); err != nil {
			return fmt.Errorf("renew lease of %s: %w", w.ThreadID, err)
		}
		return nil
	})
	return expires, err
}

// ReleaseLease implements checkpoints.LeaseBackend. The row stays, with no
// owner, so the next fence is greater.
func (s *Store) ReleaseLease(ctx context.Context, w checkpoints.Writer) (err error) {
	defer markUnavailable(&err)
	if err := checkpoints.ValidateID("thread id", w.ThreadID); err != nil {
		return err
	}
	return s.write(ctx, func(tx pgx.Tx) error {
		if err := s.lockWriter(ctx, tx, w.ThreadID, w); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE alineo_checkpoint_leases SET owner_token = '' WHERE thread_id = $1`, w.ThreadID); err != nil {
			return fmt.Errorf("release lease of %s: %w", w.ThreadID, err)
		}
		return nil
	})
}

// ListBlobReferences implements checkpoints.Store.
func (s *Store) ListBlobReferences(ctx context.Context) (_ []checkpoints.BlobRef, err error) {
	defer markUnavailable(&err)
	p, err := s.db()
	if err != nil {
		return nil, err
	}
	rows, err := p.Query(ctx, `SELECT blob_key, SUM(refs)::bigint FROM alineo_checkpoint_blob_refs GROUP BY blob_key ORDER BY blob_key`)
	if err != nil {
		return nil, fmt.Errorf("list blob references: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (checkpoints.BlobRef, error) {
		var (
			ref checkpoints.BlobRef
			n   int64
		)
		err := r.Scan(&ref.Key, &n)
		ref.References = int(n)
		return ref, err
	})
	if err != nil {
		return nil, fmt.Errorf("list blob references: %w", err)
	}
	return out, nil
}

// ForkFromCheckpoint implements checkpoints.Store.
func (s *Store) ForkFromCheckpoint(ctx context.Context, in checkpoints.ForkInput) (_ *checkpoints.Checkpoint, err error) {
	defer markUnavailable(&err)
	if err := in.Validate(); err != nil {
		return nil, err
	}
	var out *checkpoints.Checkpoint
	err = s.write(ctx, func(tx pgx.Tx) error {
		if err := s.lockWriter(ctx, tx, in.DestinationThreadID, in.Writer); err != nil {
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
		var busy, dup bool
		if err := tx.QueryRow(ctx, `SELECT
			EXISTS (SELECT 1 FROM alineo_checkpoint_heads WHERE thread_id = $1) OR EXISTS (SELECT 1 FROM alineo_checkpoints WHERE thread_id = $1),
			EXISTS (SELECT 1 FROM alineo_checkpoints WHERE id = $2)`, in.DestinationThreadID, in.DestinationCheckpointID).Scan(&busy, &dup); err != nil {
			return fmt.Errorf("check fork destination %s: %w", in.DestinationThreadID, err)
		}
		if busy {
			return checkpoints.Errorf(checkpoints.CodeForkDestinationNotEmpty, "fork destination thread %q is not empty", in.DestinationThreadID)
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
