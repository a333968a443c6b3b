package alineo_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/adaptertest"
	"github.com/alineo-labs/alineo/events"
)

// fileLedger is a custom ledger: an append-only file of JSON lines, one entry
// per line with its Seq. It implements adapters.Ledger and nothing else, which
// is all the SDK needs to record sandboxes and resume them; listings need a
// read model (alineo.Options.ReadModel) and are not its business.
type fileLedger struct {
	path string

	mu   sync.Mutex // guards everything below, and the file
	f    *os.File
	next uint64 // Seq of the next entry
	// chain links each entry after its session's last (the hash chain
	// every ledger keeps, docs/architecture.md §4.10); it is rebuilt from the
	// file on open.
	chain  events.Chain
	closed bool
}

var _ adapters.Ledger = (*fileLedger)(nil)

// openFileLedger opens (or creates) the ledger file at path.
func openFileLedger(path string) (*fileLedger, error) {
	l := &fileLedger{path: path, next: 1}
	es, err := l.load()
	if err != nil {
		return nil, err
	}
	for _, e := range es {
		l.next = max(l.next, e.Seq+1)
		if e.Hash != "" {
			l.chain.Seed(e.Session(), e.Hash)
		}
	}
	if l.f, err = os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err != nil {
		return nil, err
	}
	return l, nil
}

// load reads every entry in the file, in file order.
func (l *fileLedger) load() ([]events.Entry, error) {
	f, err := os.Open(l.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var es []events.Entry
	dec := json.NewDecoder(bufio.NewReader(f))
	for dec.More() {
		var e events.Entry
		if err := dec.Decode(&e); err != nil {
			return nil, fmt.Errorf("%s: entry %d: %w", l.path, len(es)+1, err)
		}
		es = append(es, e)
	}
	return es, nil
}

// check is called with l.mu held.
func (l *fileLedger) check(ctx context.Context) error {
	if l.closed {
		return adapters.ErrClosed
	}
	return ctx.Err()
}

// Append validates e (the SDK validated it already, but anyone may call
// Append) and writes it as one line.
func (l *fileLedger) Append(ctx context.Context, e events.Entry) error {
	return l.AppendBatch(ctx, []events.Entry{e})
}

// AppendBatch validates every entry, then writes them all in one write.
func (l *fileLedger) AppendBatch(ctx context.Context, es []events.Entry) error {
	for i, e := range es {
		if err := events.Validate(e); err != nil {
			return fmt.Errorf("append entry %d: %w", i, err)
		}
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.check(ctx); err != nil {
		return err
	}
	var buf bytes.Buffer
	chain := l.chain.Clone() // moved on only once the write succeeded
	for i, e := range es {
		e.Seq = l.next + uint64(i)
		e, err := chain.Link(e)
		if err != nil {
			return fmt.Errorf("append entry %d: %w", i, err)
		}
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		buf.Write(append(line, '\n'))
	}
	if _, err := l.f.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("%w: %w", adapters.ErrUnavailable, err)
	}
	l.next += uint64(len(es))
	l.chain = chain
	return nil
}

// ReadAll reads the file and keeps the session's entries, ordered by (Ts, Seq).
func (l *fileLedger) ReadAll(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.check(ctx); err != nil {
		return nil, err
	}
	all, err := l.load()
	if err != nil {
		return nil, err
	}
	es := slices.DeleteFunc(all, func(e events.Entry) bool { return e.Name != name || e.SandboxID != sandboxID })
	slices.SortStableFunc(es, func(a, b events.Entry) int {
		return cmp.Or(cmp.Compare(a.Ts, b.Ts), cmp.Compare(a.Seq, b.Seq))
	})
	return es, nil
}

func (l *fileLedger) checkpoints(ctx context.Context, name, sandboxID string) ([]events.Entry, error) {
	es, err := l.ReadAll(ctx, name, sandboxID)
	return slices.DeleteFunc(es, func(e events.Entry) bool { return e.Event != events.CheckpointCreated }), err
}

// LastCheckpoint returns the session's last sandbox.checkpoint_created, or nil.
func (l *fileLedger) LastCheckpoint(ctx context.Context, name, sandboxID string) (*events.Entry, error) {
	es, err := l.checkpoints(ctx, name, sandboxID)
	if err != nil || len(es) == 0 {
		return nil, err
	}
	return &es[len(es)-1], nil
}

// ListCheckpoints returns the session's checkpoints in order.
func (l *fileLedger) ListCheckpoints(ctx context.Context, name, sandboxID string) ([]adapters.CheckpointInfo, error) {
	es, err := l.checkpoints(ctx, name, sandboxID)
	if err != nil {
		return nil, err
	}
	out := make([]adapters.CheckpointInfo, 0, len(es))
	for _, e := range es {
		var p events.CheckpointCreatedPayload
		if err := e.Decode(&p); err != nil {
			return nil, fmt.Errorf("entry %d: %w", e.Seq, err)
		}
		out = append(out, adapters.CheckpointInfo{SnapshotID: p.SnapshotID, Tag: p.Name, CreatedAt: e.Ts})
	}
	return out, nil
}

// DeleteSandbox rewrites the file without the session's lines.
func (l *fileLedger) DeleteSandbox(ctx context.Context, name, sandboxID string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err := l.check(ctx); err != nil {
		return err
	}
	all, err := l.load()
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	for _, e := range all {
		if e.Name == name && e.SandboxID == sandboxID {
			continue
		}
		line, err := json.Marshal(e)
		if err != nil {
			return err
		}
		buf.Write(append(line, '\n'))
	}
	tmp := l.path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o600); err != nil {
		return err
	}
	if err := os.Rename(tmp, l.path); err != nil {
		return err
	}
	f, err := os.OpenFile(l.path, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	l.f.Close()
	l.f = f
	return nil
}

// Close closes the file. It is idempotent.
func (l *fileLedger) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil
	}
	l.closed = true
	return l.f.Close()
}

// A custom ledger is enough for recording and resume: here an append-only
// JSON-lines file. Without a read model, Resume is told the session's name.
func Example_customLedger() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "alineo-ledger-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ledger, err := openFileLedger(filepath.Join(dir, "ledger.jsonl"))
	if err != nil {
		log.Fatal(err)
	}
	defer ledger.Close()
	client, err := alineo.New(alineo.Options{BaseURL: exampleServerURL(), Adapter: ledger})
	if err != nil {
		log.Fatal(err)
	}

	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "build"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)
	if _, err := sb.Exec(ctx, "echo installed > /dep && echo install done").Wait(); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Checkpoint(ctx, "after-install"); err != nil {
		log.Fatal(err)
	}

	// Later, perhaps in another process that opens the same file.
	resumed, err := client.Resume(ctx, sb.ID(), alineo.ResumeOptions{Name: "build"})
	if err != nil {
		log.Fatal(err)
	}
	defer resumed.Close(ctx)
	res, err := resumed.Exec(ctx, "echo installed > /dep && echo install done").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print("replayed: ", res.Stdout)
	res, err = resumed.Exec(ctx, "cat /dep").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print("live: ", res.Stdout)

	// Listings are the read model's, which this client does not have.
	_, err = client.Sandboxes().List(ctx, alineo.ListOptions{})
	fmt.Println(errors.Is(err, alineo.ErrNoReadModel))
	// Output:
	// replayed: install done
	// live: installed
	// true
}

// TestFileLedgerConformance runs the Ledger half of the storage suite against
// the example's ledger: a custom ledger passes it like the built-in ones.
func TestFileLedgerConformance(t *testing.T) {
	adaptertest.RunLedger(t, func(t *testing.T) adapters.Ledger {
		l, err := openFileLedger(filepath.Join(t.TempDir(), "ledger.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}
