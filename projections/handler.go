package projections

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"path"
	"slices"
	"strings"

	"github.com/alineo-labs/alineo/events"
)

// Handler is a projection: it keeps a read model of its own from the ledger.
// The Runtime hands it batches in stream order; it applies each in one
// transaction together with the batch's offset under b.Key, and Offset reads
// that offset back. A handler that does this gets every entry applied exactly
// once across crashes and redeliveries (the runtime resumes after Offset and
// redelivers nothing it has seen committed). A handler that cannot store the
// offset with its rows gets at least once: it must then make Apply idempotent
// (upsert by Entry.Seq, or skip entries whose Seq it already holds).
//
// Apply is called by one goroutine per key at a time; handlers of several
// partitions (different keys) may share one database. An error is retried
// with backoff until it succeeds (a store that is down); an error wrapping a
// *PoisonError naming an entry of the batch instead parks that entry on the
// dead-letter subject and applies the batch again without it, the projection
// going on (one naming no entry of the batch is retried like any error).
type Handler interface {
	// Apply stores b.Entries and sets b.Key's offset to b.Offset, both or neither.
	// b.Entries may be empty (an offset-only advance).
	Apply(ctx context.Context, b Batch) error
	// Offset returns the offset stored under key, 0 if none.
	Offset(ctx context.Context, key string) (uint64, error)
}

// Batch is a run of ledger entries in stream order.
type Batch struct {
	// Key is the offset key: the consumer's name (with a partition suffix when partitioned).
	Key string
	// Entries are the batch's entries that passed the filter and decoded, each
	// with its stream sequence in Seq.
	Entries []events.Entry
	// Offset is the stream sequence the batch ends at. It is at least the last
	// entry's Seq: messages filtered out, parked or of other partitions count too.
	Offset uint64
}

// PoisonError marks the entry at stream sequence Seq as one the handler can
// never apply (bad data, not a store failure). Return it (or an error wrapping
// it) from Apply and the runtime parks that entry and goes on.
type PoisonError struct {
	Seq uint64
	Err error
}

// Poison returns a *PoisonError for the entry at seq.
func Poison(seq uint64, err error) error { return &PoisonError{Seq: seq, Err: err} }

func (e *PoisonError) Error() string {
	return fmt.Sprintf("poison entry at seq %d: %v", e.Seq, e.Err)
}

// Unwrap returns the cause.
func (e *PoisonError) Unwrap() error { return e.Err }

// Filter says which entries a projection reads. The zero value reads all.
// Events and literal sandbox ids are pushed down into the consumer's filter
// subjects (alineo.ledger.<sandbox>.<event>), so JetStream does not deliver the
// rest; sandbox patterns and name patterns are matched by the runtime.
type Filter struct {
	// Events keeps entries of these events ("" or empty: any): known events
	// or extension events (events.Event.Extension).
	Events []events.Event
	// Sandboxes keeps entries whose sandbox id matches one of these path.Match
	// patterns (empty: any). Literal ids are pushed down to JetStream.
	Sandboxes []string
	// Names keeps entries whose session name matches one of these path.Match
	// patterns (empty: any).
	Names []string
}

// maxFilterSubjects bounds the pushed-down subject list; a larger product of
// events and sandboxes is filtered by the runtime instead.
const maxFilterSubjects = 256

// Validate reports a malformed pattern, or an event that is neither known nor
// an extension event, wrapping ErrInvalidConfig.
func (f Filter) Validate() error {
	for _, ev := range f.Events {
		if !ev.Valid() { // a known event or an extension event
			return fmt.Errorf("%w: filter: %w", ErrInvalidConfig, events.CheckEvent(ev))
		}
	}
	for _, p := range append(slices.Clone(f.Sandboxes), f.Names...) {
		if _, err := path.Match(p, ""); err != nil {
			return fmt.Errorf("%w: filter pattern %q: %w", ErrInvalidConfig, p, err)
		}
	}
	for _, s := range f.Sandboxes {
		if strings.ContainsAny(s, ". \t\r\n>") {
			return fmt.Errorf("%w: filter sandbox %q is not one subject token", ErrInvalidConfig, s)
		}
	}
	return nil
}

func isLiteral(p string) bool { return !strings.ContainsAny(p, `*?[\`) }

// Subjects returns the JetStream filter subjects f is pushed down to under
// the ledger subject prefix (what the runtime's consumer reads).
func (f Filter) Subjects(prefix string) []string {
	s, _ := f.subjects(prefix)
	return s
}

// subjects returns the JetStream filter subjects for f under prefix, and
// whether the runtime must still check sandbox patterns itself.
func (f Filter) subjects(prefix string) (subs []string, checkSandbox bool) {
	ids := []string{"*"}
	if len(f.Sandboxes) > 0 && !slices.ContainsFunc(f.Sandboxes, func(s string) bool { return !isLiteral(s) }) {
		ids = slices.Compact(slices.Sorted(slices.Values(f.Sandboxes)))
	} else if len(f.Sandboxes) > 0 {
		checkSandbox = true
	}
	evs := []string{">"}
	if len(f.Events) > 0 {
		evs = evs[:0]
		for _, ev := range f.Events {
			evs = append(evs, string(ev))
		}
		evs = slices.Compact(slices.Sorted(slices.Values(evs)))
	}
	if len(ids)*len(evs) > maxFilterSubjects {
		return []string{prefix + ".>"}, len(f.Sandboxes) > 0
	}
	for _, id := range ids {
		for _, ev := range evs {
			subs = append(subs, prefix+"."+id+"."+ev)
		}
	}
	return subs, checkSandbox
}

// keepSandbox reports whether id matches the sandbox patterns.
func (f Filter) keepSandbox(id string) bool {
	return len(f.Sandboxes) == 0 || matchAny(f.Sandboxes, id)
}

// keepEvent reports whether ev is one of Events.
func (f Filter) keepEvent(ev events.Event) bool {
	return len(f.Events) == 0 || slices.Contains(f.Events, ev)
}

// keepName reports whether name matches the name patterns.
func (f Filter) keepName(name string) bool { return len(f.Names) == 0 || matchAny(f.Names, name) }

func matchAny(patterns []string, s string) bool {
	for _, p := range patterns {
		if ok, _ := path.Match(p, s); ok {
			return true
		}
	}
	return false
}

// PartitionOf returns the partition (0..n-1) of a sandbox among n: FNV-1a of
// the id modulo n. It is part of the storage format of partitioned offsets;
// it never changes.
func PartitionOf(sandboxID string, n int) int {
	if n <= 1 {
		return 0
	}
	h := fnv.New32a()
	h.Write([]byte(sandboxID))
	return int(h.Sum32() % uint32(n))
}

// PartitionKey is the offset key (and durable consumer name) of partition i of
// n of consumer: consumer itself when n <= 1, else consumer-p<i>-of-<n>.
func PartitionKey(consumer string, i, n int) string {
	if n <= 1 {
		return consumer
	}
	return fmt.Sprintf("%s-p%d-of-%d", consumer, i, n)
}

// Partitioning is a split of the stream into N partitions by sandbox id; a
// worker runs partition Index. The zero value is one partition.
type Partitioning struct {
	N     int // partitions; 0 or 1 for none
	Index int // this worker's partition, 0..N-1
}

func (p Partitioning) validate() error {
	if p.N < 0 || p.Index < 0 || (p.N > 1 && p.Index >= p.N) || (p.N <= 1 && p.Index != 0) {
		return fmt.Errorf("%w: partition %d of %d", ErrInvalidConfig, p.Index, p.N)
	}
	return nil
}

func (p Partitioning) owns(sandboxID string) bool {
	return p.N <= 1 || PartitionOf(sandboxID, p.N) == p.Index
}

var errNoHandler = errors.New("no handler")
