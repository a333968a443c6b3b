package projections

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"sync"

	"github.com/alineo-labs/alineo/adapters"
)

// Target is where a projection writes, as cmd/projector opened it: a
// database/sql database, and for the product's tables the store on it.
type Target struct {
	DB      *sql.DB
	Dialect Dialect
	// Store is the product's store; set only for a Definition with UsesStore.
	Store adapters.ProjectionStore
	// Desc describes the target for logs ("sqlite ./alineo.db").
	Desc string
}

// Definition is a projection that cmd/projector can run, rebuild and verify
// by name.
type Definition struct {
	// Name is how --projection selects it: a durable consumer name too, so
	// letters, digits, - and _.
	Name string
	// Help is one line for the command's help.
	Help string
	// Filter selects the entries the projection reads.
	Filter Filter
	// UsesStore says the projection writes the product's store (Target.Store)
	// rather than Target.DB.
	UsesStore bool
	// Open returns the projection's handler on t.
	Open func(ctx context.Context, t Target) (Handler, error)
	// Verify compares two targets of this projection row for row and returns
	// nil when equal, an error wrapping ErrMismatch when not; nil Verify means
	// the projection cannot be verified.
	Verify func(ctx context.Context, a, b Target) error
}

var registry struct {
	mu   sync.Mutex
	defs map[string]Definition
}

// Register makes d available by name. Like sql.Register it panics on an
// empty or duplicate name or a nil Open: registration happens in init.
func Register(d Definition) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	if d.Name == "" || d.Open == nil {
		panic("projections: Register needs a Name and Open")
	}
	if _, dup := registry.defs[d.Name]; dup {
		panic("projections: Register called twice for " + d.Name)
	}
	if registry.defs == nil {
		registry.defs = map[string]Definition{}
	}
	registry.defs[d.Name] = d
}

// Lookup returns the projection registered as name, or an error wrapping
// ErrUnknownProjection.
func Lookup(name string) (Definition, error) {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	d, ok := registry.defs[name]
	if !ok {
		return d, fmt.Errorf("%w: %q (registered: %v)", ErrUnknownProjection, name, namesLocked())
	}
	return d, nil
}

// Names returns the registered projections' names, sorted.
func Names() []string {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	return namesLocked()
}

func namesLocked() []string {
	var ns []string
	for n := range registry.defs {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

func init() {
	Register(Definition{
		Name:      TablesProjection,
		Help:      "the product's tables: entries and sandbox details (the API's read model)",
		UsesStore: true,
		Open: func(_ context.Context, t Target) (Handler, error) {
			if t.Store == nil {
				return nil, fmt.Errorf("%w: the tables projection needs a store", ErrInvalidConfig)
			}
			return TablesHandler(t.Store), nil
		},
		Verify: func(ctx context.Context, a, b Target) error {
			sa, oka := a.Store.(adapters.Store)
			sb, okb := b.Store.(adapters.Store)
			if !oka || !okb {
				return fmt.Errorf("%w: verify needs two readable stores", ErrInvalidConfig)
			}
			return Verify(ctx, sa, sb)
		},
	})
}
