package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

// TestSDKOnTheBus runs the SDK in fleet mode: the bus ledger is its adapter,
// a projector keeps the read model, and Resume replays from the stream.
func TestSDKOnTheBus(t *testing.T) {
	url := testenv.Sandboxd(t)
	b := openEmbedded(t, bus.Config{})
	rm := memory.New()
	p := &projections.Projector{Bus: b, Store: rm, BatchWait: 5 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	l, err := bus.NewLedger(b, bus.LedgerConfig{Projection: rm, AwaitProjection: p.Await})
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	defer l.Close()
	// The read model is the projector's; the client reads its own writes there.
	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: l, ReadModel: rm,
		AwaitReadModel: func(ctx context.Context) error {
			if err := l.Flush(ctx); err != nil {
				return err
			}
			return p.Await(ctx, l.LastSeq())
		}})
	if err != nil {
		t.Fatalf("alineo.New: %v", err)
	}
	tctx, tcancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer tcancel()

	// A live auditor watches every exec.completed of the fleet.
	audit, err := b.Subscribe(tctx, bus.Filter{Events: []events.Event{events.ExecCompleted}})
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	seen := make(chan events.Entry, 16)
	go func() {
		for e, err := range audit {
			if err != nil {
				return
			}
			seen <- e
		}
	}()

	sb, err := client.Sandbox(tctx, alineo.SandboxOptions{Image: "host", Name: "fleet"})
	if err != nil {
		t.Fatalf("Sandbox: %v", err)
	}
	defer sb.Close(tctx)
	if _, err := sb.Exec(tctx, "echo installed > /dep && echo install done").Wait(); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if _, err := sb.Checkpoint(tctx, "after-install"); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	select {
	case e := <-seen:
		if e.SandboxID != sb.ID() {
			t.Fatalf("auditor saw %s, want %s", e.SandboxID, sb.ID())
		}
	case <-tctx.Done():
		t.Fatalf("auditor saw no exec.completed")
	}

	// Resume reads the stream: the first call replays, the next runs live.
	resumed, err := client.Resume(tctx, sb.ID(), alineo.ResumeOptions{})
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	defer resumed.Close(tctx)
	res, err := resumed.Exec(tctx, "echo installed > /dep && echo install done").Wait()
	if err != nil || res.Stdout != "install done\n" {
		t.Fatalf("replayed Exec = %+v, %v; want the recorded output", res, err)
	}
	res, err = resumed.Exec(tctx, "cat /dep").Wait()
	if err != nil || res.Stdout != "installed\n" {
		t.Fatalf("live Exec = %+v, %v; want the restored file", res, err)
	}

	// The read model (kept by the projector) lists both sessions.
	list, err := client.Sandboxes().List(tctx, alineo.ListOptions{})
	if err != nil || len(list) != 2 {
		t.Fatalf("List = %d sessions, %v; want 2", len(list), err)
	}
	// And it equals a rebuild from the stream, row for row.
	if err := l.Flush(tctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	rebuilt := memory.New()
	if _, err := projections.Rebuild(tctx, b, rebuilt, nil); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, func() error { return projections.Verify(tctx, rm, rebuilt) })
}

// TestSDKOnTheBusWithoutReadModel runs the SDK with a bus ledger and nothing
// else (no projector, no database): Resume of a session named in
// ResumeOptions replays from the stream, Sandboxes().Get derives the details
// from it, and a listing says that it needs a read model.
func TestSDKOnTheBusWithoutReadModel(t *testing.T) {
	url := testenv.Sandboxd(t)
	b := openEmbedded(t, bus.Config{})
	l, err := bus.NewLedger(b, bus.LedgerConfig{})
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	defer l.Close()
	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: l})
	if err != nil {
		t.Fatalf("alineo.New: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "bare"})
	if err != nil {
		t.Fatalf("Sandbox: %v", err)
	}
	defer sb.Close(ctx)
	if _, err := sb.Exec(ctx, "echo installed > /dep && echo install done").Wait(); err != nil {
		t.Fatalf("Exec: %v", err)
	}
	if _, err := sb.Checkpoint(ctx, "after-install"); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}

	resumed, err := client.Resume(ctx, sb.ID(), alineo.ResumeOptions{Name: "bare"})
	if err != nil {
		t.Fatalf("Resume with a name, no read model: %v", err)
	}
	defer resumed.Close(ctx)
	res, err := resumed.Exec(ctx, "echo installed > /dep && echo install done").Wait()
	if err != nil || res.Stdout != "install done\n" {
		t.Fatalf("replayed Exec = %+v, %v; want the recorded output", res, err)
	}
	res, err = resumed.Exec(ctx, "cat /dep").Wait()
	if err != nil || res.Stdout != "installed\n" {
		t.Fatalf("live Exec = %+v, %v; want the restored file", res, err)
	}

	d, err := client.Sandboxes().Get(ctx, "bare", sb.ID())
	if err != nil || d == nil || d.ExecCount != 1 || d.Status != adapters.StatusRunning {
		t.Fatalf("Sandboxes().Get = %+v, %v; want a running session with 1 exec", d, err)
	}
	if _, err := client.Sandboxes().List(ctx, alineo.ListOptions{}); !errors.Is(err, alineo.ErrNoReadModel) {
		t.Fatalf("Sandboxes().List = %v, want ErrNoReadModel", err)
	}
	if _, err := client.Resume(ctx, sb.ID(), alineo.ResumeOptions{}); !errors.Is(err, alineo.ErrNoReadModel) {
		t.Fatalf("Resume without a name = %v, want ErrNoReadModel", err)
	}
	if _, err := client.Environments().List(ctx); !errors.Is(err, alineo.ErrNoReadModel) {
		t.Fatalf("Environments().List = %v, want ErrNoReadModel", err)
	}
}
