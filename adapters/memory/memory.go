package memory

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/internal/entries"
	"github.com/alineo-labs/alineo/adapters/internal/summary"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/validated"
)

var (
	_ adapters.Store           = (*Store)(nil)
	_ adapters.ProjectionStore = (*Store)(nil)
	_ validated.Appender       = (*Store)(nil)
	_ validated.Applier        = (*Store)(nil)
)

// Store keeps a ledger in memory. The zero value is not usable; call New.
// All methods are safe for concurrent use.
type Store struct {
	mu sync.RWMutex
	// closed is set by Close; every later call returns adapters.ErrClosed.
	closed bool
	// nextID numbers stored rows (the row id of the SQL stores), from 1.
	nextID uint64
	// sessions holds each session's rows ordered by Ts, then by arrival;
	// a row's Seq is what a read returns (the ledger sequence of a projected
	// row, else its row id). Rows are pointers: a long session's slice grows
	// by copying a word per row, not the entry.
	sessions map[events.Session][]*events.Entry
	// ledgerSeqs holds the ledger sequences of projected rows (the unique column).
	ledgerSeqs map[uint64]events.Session
	details    map[events.Session]*sessionSummary
	envs       map[string]adapters.EnvironmentRecord
	offsets    map[string]uint64
	// chain holds each session's chain head.
	chain events.Chain
}

// sessionSummary is a session's sandbox-details row, maintained on every write.
type sessionSummary struct {
	startedAt   int64 // 0 until a sandbox.created is stored
	completedAt int64
	execCount   int
	runID       string
}

// New returns an empty store.
func New() *Store {
	return &Store{
		sessions:   make(map[events.Session][]*events.Entry),
		ledgerSeqs: make(map[uint64]events.Session),
		details:    make(map[events.Session]*sessionSummary),
		envs:       make(map[string]adapters.EnvironmentRecord),
		offsets:    make(map[string]uint64),
	}
}

// check checks ctx and the closed flag; callers hold s.mu.
func (s *Store) check(ctx context.Context) error {
	if s.closed {
		return adapters.ErrClosed
	}
	return ctx.Err()
}

// Append implements adapters.Ledger: it validates e.
func (s *Store) Append(ctx context.Context, e events.Entry) error {
	if err := events.Validate(e); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	return s.append(ctx, e)
}

// AppendBatch implements adapters.Ledger: it validates every entry first.
func (s *Store) AppendBatch(ctx context.Context, es []events.Entry) error {
	for i, e := range es {
		if err := events.Validate(e); err != nil {
			return fmt.Errorf("append batch: entry %d: %w", i, err)
		}
	}
	return s.append(ctx, es...)
}

// ValidatedSelf returns the receiver: a type embedding this one does not
// inherit the validated hand-over of AppendValidated and ApplyValidated.
func (s *Store) ValidatedSelf() any { return s }

// AppendValidated appends entries the SDK's ledger writer validated, without
// validating them again (see the adapters package doc). Only this module can
// call it with entries.
func (s *Store) AppendValidated(ctx context.Context, v validated.Entries) error {
	return s.append(ctx, v.Slice()...)
}

func (s *Store) append(ctx context.Context, es ...events.Entry) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	// Link them all first, on a chain of their sessions alone: all or nothing.
	// An exec's batches are one to three entries: those stay on the stack.
	var small [4]events.Entry
	linked := small[:0]
	if len(es) > len(small) {
		linked = make([]events.Entry, 0, len(es))
	}
	var next events.Chain
	for _, e := range es {
		if h, ok := s.chain.Head(e.Session()); ok {
			next.Seed(e.Session(), h)
		}
	}
	for _, e := range es {
		l, err := next.Link(e)
		if err != nil {
			return fmt.Errorf("append: %w", err)
		}
		linked = append(linked, l)
	}
	for _, e := range linked {
		s.insert(e, 0)
		s.chain.Seed(e.Session(), e.Hash)
	}
	return nil
}

// ApplyBatch implements adapters.ProjectionStore: it validates every entry.
func (s *Store) ApplyBatch(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
	if err := entries.ValidateProjected(consumer, es); err != nil {
		return fmt.Errorf("apply batch: %w", err)
	}
	return s.apply(ctx, consumer, es, offset)
}

// ApplyValidated is ApplyBatch for entries the projector validated as it
// decoded them: it checks only the consumer and each entry's Seq.
func (s *Store) ApplyValidated(ctx context.Context, consumer string, v validated.Entries, offset uint64) error {
	if err := entries.CheckProjectedSeqs(consumer, v.Slice()); err != nil {
		return fmt.Errorf("apply batch: %w", err)
	}
	return s.apply(ctx, consumer, v.Slice(), offset)
}

func (s *Store) apply(ctx context.Context, consumer string, es []events.Entry, offset uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	for _, e := range es {
		if _, dup := s.ledgerSeqs[e.Seq]; dup {
			continue
		}
		s.ledgerSeqs[e.Seq] = e.Session()
		s.insert(e, e.Seq)
		if e.Hash != "" {
			s.chain.Seed(e.Session(), e.Hash)
		}
	}
	s.offsets[consumer] = offset
	return nil
}

// Offset implements adapters.ProjectionStore.
func (s *Store) Offset(ctx context.Context, consumer string) (uint64, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx); err != nil {
		return 0, err
	}
	return s.offsets[consumer], nil
}

// insert stores a copy of e; seq is its ledger sequence, 0 in direct mode.
// Callers hold s.mu for writing.
func (s *Store) insert(e events.Entry, seq uint64) {
	s.nextID++
	e = clone(e)
	e.Seq = s.nextID
	if seq != 0 {
		e.Seq = seq
	}
	k := e.Session()
	rows := s.sessions[k]
	// Rows usually arrive in ts order, and go at the end; a row older than
	// the last goes after every row of its ts or older.
	i := len(rows)
	if i > 0 && rows[i-1].Ts > e.Ts {
		i = sort.Search(i, func(j int) bool { return rows[j].Ts > e.Ts })
	}
	s.sessions[k] = slices.Insert(rows, i, &e)
	s.summarise(e)
}

// summarise folds e into its session's details, as the SQL stores do in the
// transaction of the append.
func (s *Store) summarise(e events.Entry) {
	ev := e.Event.Canonical() // either vocabulary
	switch ev {
	case events.SandboxCreated, events.SandboxClosed, events.ExecCompleted:
	default:
		return
	}
	k := e.Session()
	d := s.details[k]
	if d == nil {
		d = &sessionSummary{}
		s.details[k] = d
	}
	switch ev {
	case events.SandboxCreated:
		if d.startedAt == 0 || e.Ts < d.startedAt {
			d.startedAt = e.Ts
			d.runID = summary.RunID(e)
		}
	case events.SandboxClosed:
		d.completedAt = max(d.completedAt, e.Ts)
	case events.ExecCompleted:
		d.execCount++
	}
}

func clone(e events.Entry) events.Entry {
	if e.Payload != nil {
		e.Payload = bytes.Clone(e.Payload)
	}
	if e.Branch != nil {
		b := *e.Branch
		e.Branch = &b
	}
	return e
}

// ReadAll implements adapters.Ledger.
func (s *Store) ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rows := s.sessions[events.Session{Name: name, SandboxID: sandboxID}]
	out := make([]events.Entry, len(rows))
	for i, r := range rows {
		out[i] = clone(*r)
	}
	return out, nil
}

// LastCheckpoint implements adapters.Ledger.
func (s *Store) LastCheckpoint(ctx context.Context, name, sandboxID string) (*events.Entry, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rows := s.sessions[events.Session{Name: name, SandboxID: sandboxID}]
	for i := len(rows) - 1; i >= 0; i-- {
		if rows[i].Event.Is(events.CheckpointCreated) {
			e := clone(*rows[i])
			return &e, nil
		}
	}
	return nil, nil
}

// ListCheckpoints implements adapters.Ledger.
func (s *Store) ListCheckpoints(ctx context.Context, name, sandboxID string) ([]adapters.CheckpointInfo, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var out []adapters.CheckpointInfo
	for _, r := range s.sessions[events.Session{Name: name, SandboxID: sandboxID}] {
		if !r.Event.Is(events.CheckpointCreated) {
			continue
		}
		var p events.CheckpointCreatedPayload
		_ = r.Decode(&p) // validated on append; a null payload leaves p empty
		out = append(out, adapters.CheckpointInfo{SnapshotID: p.SnapshotID, Tag: p.Name, CreatedAt: r.Ts})
	}
	return out, nil
}

// ListSandboxDetails implements adapters.ReadModel.
func (s *Store) ListSandboxDetails(ctx context.Context, name string, opts adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	return s.list(ctx, &name, opts)
}

// ListAllSandboxDetails implements adapters.ReadModel.
func (s *Store) ListAllSandboxDetails(ctx context.Context, opts adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	return s.list(ctx, nil, opts)
}

func (s *Store) list(ctx context.Context, name *string, opts adapters.ListOptions) ([]adapters.SandboxDetails, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	var out []adapters.SandboxDetails
	for k, d := range s.details {
		if name != nil && k.Name != *name {
			continue
		}
		sd, ok := d.details(k)
		if !ok || !match(sd, opts) {
			continue
		}
		out = append(out, sd)
	}
	slices.SortFunc(out, compareDetails)
	if opts.Limit > 0 && len(out) > opts.Limit {
		out = out[:opts.Limit]
	}
	return out, nil
}

// match reports whether d passes the filters of opts (not the limit).
func match(d adapters.SandboxDetails, opts adapters.ListOptions) bool {
	return (opts.Status == "" || d.Status == opts.Status) &&
		(opts.Before == 0 || d.StartedAt < opts.Before) &&
		(opts.RunID == "" || d.RunID == opts.RunID) &&
		(opts.SandboxID == "" || d.SandboxID == opts.SandboxID)
}

// compareDetails orders details as every store lists them: newest StartedAt first,
// then by Name and SandboxID ascending.
func compareDetails(a, b adapters.SandboxDetails) int {
	return cmp.Or(cmp.Compare(b.StartedAt, a.StartedAt), cmp.Compare(a.Name, b.Name), cmp.Compare(a.SandboxID, b.SandboxID))
}

func (d *sessionSummary) details(k events.Session) (adapters.SandboxDetails, bool) {
	if d.startedAt == 0 {
		return adapters.SandboxDetails{}, false
	}
	sd := adapters.SandboxDetails{
		Name: k.Name, SandboxID: k.SandboxID, Status: adapters.StatusRunning,
		StartedAt: d.startedAt, CompletedAt: d.completedAt, ExecCount: d.execCount, RunID: d.runID,
	}
	if d.completedAt != 0 {
		sd.Status = adapters.StatusCompleted
	}
	return sd, true
}

// GetSandboxDetails implements adapters.ReadModel.
func (s *Store) GetSandboxDetails(ctx context.Context, name, sandboxID string) (*adapters.SandboxDetails, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	k := events.Session{Name: name, SandboxID: sandboxID}
	d := s.details[k]
	if d == nil {
		return nil, nil
	}
	sd, ok := d.details(k)
	if !ok {
		return nil, nil
	}
	return &sd, nil
}

// DeleteSandbox implements adapters.Ledger.
func (s *Store) DeleteSandbox(ctx context.Context, name, sandboxID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	k := events.Session{Name: name, SandboxID: sandboxID}
	for seq, owner := range s.ledgerSeqs {
		if owner == k {
			delete(s.ledgerSeqs, seq)
		}
	}
	delete(s.sessions, k)
	delete(s.details, k)
	s.chain.Forget(k)
	return nil
}

// GetEnvironment implements adapters.ReadModel.
func (s *Store) GetEnvironment(ctx context.Context, name string) (*adapters.EnvironmentRecord, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	rec, ok := s.envs[name]
	if !ok {
		return nil, nil
	}
	return &rec, nil
}

// SaveEnvironment implements adapters.ReadModel.
func (s *Store) SaveEnvironment(ctx context.Context, rec adapters.EnvironmentRecord) error {
	if err := validateEnvironment(rec); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	s.envs[rec.Name] = rec
	return nil
}

// validateEnvironment checks rec before it is saved: a non-empty Name.
func validateEnvironment(rec adapters.EnvironmentRecord) error {
	if rec.Name == "" {
		return fmt.Errorf("save environment: %w", &events.ValidationError{Field: "environment.name", Reason: "is empty"})
	}
	return nil
}

// DeleteEnvironment implements adapters.ReadModel.
func (s *Store) DeleteEnvironment(ctx context.Context, name string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(ctx); err != nil {
		return err
	}
	delete(s.envs, name)
	return nil
}

// ListEnvironments implements adapters.ReadModel.
func (s *Store) ListEnvironments(ctx context.Context) ([]adapters.EnvironmentRecord, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	out := make([]adapters.EnvironmentRecord, 0, len(s.envs))
	for _, rec := range s.envs {
		out = append(out, rec)
	}
	slices.SortFunc(out, compareEnv)
	return out, nil
}

// compareEnv orders environments newest BuiltAt first, then by name.
func compareEnv(a, b adapters.EnvironmentRecord) int {
	return cmp.Or(cmp.Compare(b.BuiltAt, a.BuiltAt), cmp.Compare(a.Name, b.Name))
}

// Close implements adapters.Ledger. It drops the contents.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.sessions, s.details, s.ledgerSeqs, s.envs, s.offsets = nil, nil, nil, nil, nil
	return nil
}
