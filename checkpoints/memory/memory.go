package memory

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/alineo-labs/alineo/checkpoints"
)

var (
	_ checkpoints.Store        = (*Store)(nil)
	_ checkpoints.LeaseBackend = (*Store)(nil)
)

type lease struct {
	token     string
	fence     int64
	expiresAt time.Time
}

// Store is an in-memory checkpoints.Store. The zero value is not usable; call New.
type Store struct {
	opts checkpoints.Options

	mu          sync.Mutex
	closed      bool
	checkpoints map[string]*checkpoints.Checkpoint
	threads     map[string][]string // checkpoint ids in append order
	heads       map[string]string
	leases      map[string]*lease // live or ended; ended has token ""
	refs        map[string]int
}

// New returns an empty store.
func New(opts checkpoints.Options) *Store {
	return &Store{
		opts:        opts.WithDefaults(),
		checkpoints: map[string]*checkpoints.Checkpoint{},
		threads:     map[string][]string{},
		heads:       map[string]string{},
		leases:      map[string]*lease{},
		refs:        map[string]int{},
	}
}

func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return checkpoints.ErrClosed
	}
	return nil
}

// Get implements checkpoints.Store.
func (s *Store) Get(ctx context.Context, id string) (*checkpoints.Checkpoint, error) {
	if err := checkpoints.ValidateID("checkpoint id", id); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	c, ok := s.checkpoints[id]
	if !ok {
		return nil, checkpoints.Errorf(checkpoints.CodeCheckpointNotFound, "checkpoint %q not found", id)
	}
	return c.Clone(), nil
}

// List implements checkpoints.Store.
func (s *Store) List(ctx context.Context, threadID string) ([]*checkpoints.Checkpoint, error) {
	if err := checkpoints.ValidateID("thread id", threadID); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	ids := s.threads[threadID]
	out := make([]*checkpoints.Checkpoint, 0, len(ids))
	for _, id := range ids {
		out = append(out, s.checkpoints[id].Clone())
	}
	return out, nil
}

// Threads implements checkpoints.Store.
func (s *Store) Threads(ctx context.Context) ([]string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.threads))
	for t := range s.threads {
		out = append(out, t)
	}
	sort.Strings(out)
	return out, nil
}

// Head implements checkpoints.Store.
func (s *Store) Head(ctx context.Context, threadID string) (string, error) {
	if err := checkpoints.ValidateID("thread id", threadID); err != nil {
		return "", err
	}
	if err := s.lock(ctx); err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	return s.heads[threadID], nil
}

// checkWriter reports ErrWriterLost unless w holds thread's live lease. s.mu is held.
func (s *Store) checkWriter(threadID string, w checkpoints.Writer) error {
	l := s.leases[threadID]
	switch {
	case w.ThreadID != threadID:
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "writer of thread %q cannot write thread %q", w.ThreadID, threadID)
	case l == nil || l.token == "" || l.token != w.OwnerToken || l.fence != w.Fence:
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "writer (fence %d) of thread %q does not hold the lease", w.Fence, threadID)
	case !s.opts.Now().Before(l.expiresAt):
		return checkpoints.Errorf(checkpoints.CodeWriterLost, "lease (fence %d) of thread %q expired", w.Fence, threadID)
	}
	return nil
}

func (s *Store) insert(c *checkpoints.Checkpoint) {
	s.checkpoints[c.ID] = c
	s.threads[c.ThreadID] = append(s.threads[c.ThreadID], c.ID)
	s.heads[c.ThreadID] = c.ID
	for _, k := range c.BlobKeys() {
		s.refs[k]++
	}
}

// Append implements checkpoints.Store.
func (s *Store) Append(ctx context.Context, in checkpoints.AppendInput) (string, error) {
	if err := in.Validate(); err != nil {
		return "", err
	}
	c := in.Checkpoint.Clone()
	if err := s.lock(ctx); err != nil {
		return "", err
	}
	defer s.mu.Unlock()
	if err := s.checkWriter(c.ThreadID, in.Writer); err != nil {
		return "", err
	}
	if _, dup := s.checkpoints[c.ID]; dup {
		return "", checkpoints.Errorf(checkpoints.CodeDuplicateID, "checkpoint %q already exists", c.ID)
	}
	if head := s.heads[c.ThreadID]; head != in.ExpectedHead {
		return "", checkpoints.Errorf(checkpoints.CodeStaleHead, "thread %q head is %q, expected %q", c.ThreadID, head, in.ExpectedHead)
	}
	c.Stamp(s.opts.Now())
	s.insert(c)
	return c.ID, nil
}

// DeleteHead implements checkpoints.Store.
func (s *Store) DeleteHead(ctx context.Context, in checkpoints.DeleteHeadInput) error {
	if err := in.Validate(); err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := s.checkWriter(in.ThreadID, in.Writer); err != nil {
		return err
	}
	c, ok := s.checkpoints[in.CheckpointID]
	if !ok {
		return checkpoints.Errorf(checkpoints.CodeCheckpointNotFound, "checkpoint %q not found", in.CheckpointID)
	}
	if c.ThreadID != in.ThreadID || s.heads[in.ThreadID] != c.ID {
		return checkpoints.Errorf(checkpoints.CodeNotHead, "checkpoint %q is not the head of thread %q", c.ID, in.ThreadID)
	}
	s.remove(c)
	return nil
}

// remove deletes c, moving the head to its parent if c is the head. s.mu is held.
func (s *Store) remove(c *checkpoints.Checkpoint) {
	delete(s.checkpoints, c.ID)
	ids := s.threads[c.ThreadID]
	for i, id := range ids {
		if id == c.ID {
			ids = append(ids[:i:i], ids[i+1:]...)
			break
		}
	}
	if len(ids) == 0 {
		delete(s.threads, c.ThreadID)
	} else {
		s.threads[c.ThreadID] = ids
	}
	if s.heads[c.ThreadID] == c.ID {
		if c.ParentID == "" {
			delete(s.heads, c.ThreadID)
		} else {
			s.heads[c.ThreadID] = c.ParentID
		}
	}
	for _, k := range c.BlobKeys() {
		if s.refs[k]--; s.refs[k] <= 0 {
			delete(s.refs, k)
		}
	}
}

// DeleteCheckpoint implements checkpoints.Store.
func (s *Store) DeleteCheckpoint(ctx context.Context, in checkpoints.DeleteHeadInput) error {
	if err := in.Validate(); err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := s.checkWriter(in.ThreadID, in.Writer); err != nil {
		return err
	}
	c, ok := s.checkpoints[in.CheckpointID]
	if !ok || c.ThreadID != in.ThreadID {
		return checkpoints.Errorf(checkpoints.CodeCheckpointNotFound, "checkpoint %q not found in thread %q", in.CheckpointID, in.ThreadID)
	}
	for _, id := range s.threads[c.ThreadID] {
		if child := s.checkpoints[id]; child.ParentID == c.ID {
			child.ParentID = c.ParentID
		}
	}
	s.remove(c)
	return nil
}

// AcquireWriter implements checkpoints.Store.
func (s *Store) AcquireWriter(ctx context.Context, threadID string) (*checkpoints.Lease, error) {
	if err := checkpoints.ValidateID("thread id", threadID); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	now := s.opts.Now()
	l := s.leases[threadID]
	if l != nil && l.token != "" && now.Before(l.expiresAt) {
		return nil, checkpoints.Errorf(checkpoints.CodeWriterConflict, "thread %q has a live writer (fence %d)", threadID, l.fence)
	}
	var fence int64 = 1
	if l != nil {
		fence = l.fence + 1
	}
	nl := &lease{token: checkpoints.NewToken(), fence: fence, expiresAt: now.Add(s.opts.LeaseDuration)}
	s.leases[threadID] = nl
	w := checkpoints.Writer{ThreadID: threadID, OwnerToken: nl.token, Fence: fence}
	return checkpoints.NewLease(w, nl.expiresAt, s.opts.RenewAfter, s), nil
}

// RenewLease implements checkpoints.LeaseBackend.
func (s *Store) RenewLease(ctx context.Context, w checkpoints.Writer) (time.Time, error) {
	if err := s.lock(ctx); err != nil {
		return time.Time{}, err
	}
	defer s.mu.Unlock()
	if err := s.checkWriter(w.ThreadID, w); err != nil {
		return time.Time{}, err
	}
	l := s.leases[w.ThreadID]
	l.expiresAt = s.opts.Now().Add(s.opts.LeaseDuration)
	return l.expiresAt, nil
}

// ReleaseLease implements checkpoints.LeaseBackend.
func (s *Store) ReleaseLease(ctx context.Context, w checkpoints.Writer) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := s.checkWriter(w.ThreadID, w); err != nil {
		return err
	}
	s.leases[w.ThreadID].token = "" // keep the fence: the next one is greater
	return nil
}

// ListBlobReferences implements checkpoints.Store.
func (s *Store) ListBlobReferences(ctx context.Context) ([]checkpoints.BlobRef, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]checkpoints.BlobRef, 0, len(s.refs))
	for k, n := range s.refs {
		out = append(out, checkpoints.BlobRef{Key: k, References: n})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// ForkFromCheckpoint implements checkpoints.Store.
func (s *Store) ForkFromCheckpoint(ctx context.Context, in checkpoints.ForkInput) (*checkpoints.Checkpoint, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if err := s.checkWriter(in.DestinationThreadID, in.Writer); err != nil {
		return nil, err
	}
	src, ok := s.checkpoints[in.SourceCheckpointID]
	if !ok {
		return nil, checkpoints.Errorf(checkpoints.CodeForkSourceNotFound, "fork source %q not found", in.SourceCheckpointID)
	}
	if src.ThreadID != in.SourceThreadID {
		return nil, checkpoints.Errorf(checkpoints.CodeForkSourceThreadMismatch, "fork source %q belongs to thread %q, not %q", src.ID, src.ThreadID, in.SourceThreadID)
	}
	if len(s.threads[in.DestinationThreadID]) > 0 || s.heads[in.DestinationThreadID] != "" {
		return nil, checkpoints.Errorf(checkpoints.CodeForkDestinationNotEmpty, "fork destination thread %q is not empty", in.DestinationThreadID)
	}
	if _, dup := s.checkpoints[in.DestinationCheckpointID]; dup {
		return nil, checkpoints.Errorf(checkpoints.CodeDuplicateID, "checkpoint %q already exists", in.DestinationCheckpointID)
	}
	c := checkpoints.ForkRoot(src, in, s.opts.Now())
	s.insert(c)
	return c.Clone(), nil
}

// Close implements checkpoints.Store.
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
