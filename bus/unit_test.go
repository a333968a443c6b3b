package bus_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/events"
)

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  bus.Config
	}{
		{"replicas", bus.Config{Replicas: 7}},
		{"negative age", bus.Config{MaxAge: -time.Second}},
		{"wildcard prefix", bus.Config{SubjectPrefix: "a.*"}},
		{"fence inside ledger", bus.Config{SubjectPrefix: "x", FencePrefix: "x.fence"}},
		{"dlq inside ledger", bus.Config{DLQSubject: events.DefaultSubjectPrefix + ".dlq"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.URL = "nats://127.0.0.1:1" // never dialled: validation comes first
			if _, err := bus.Open(context.Background(), tc.cfg); !errors.Is(err, bus.ErrInvalidConfig) {
				t.Fatalf("Open(%+v) = %v, want ErrInvalidConfig", tc.cfg, err)
			}
		})
	}
}

// TestEmbeddedRestart opens the embedded server (no URL) on a store
// directory, writes, closes, and opens it again: the stream is updated in
// place and the history is still there.
func TestEmbeddedRestart(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	id := bustest.ID("embedded")
	es := bustest.Entries("n", id, 2, 3)
	for round := range 2 {
		b, err := bus.Open(ctx, bus.Config{StoreDir: dir})
		if err != nil {
			t.Fatalf("Open round %d: %v", round, err)
		}
		l, err := bus.NewLedger(b, bus.LedgerConfig{WriterID: "w"})
		if err != nil {
			t.Fatalf("NewLedger: %v", err)
		}
		if round == 0 {
			for _, e := range es {
				if err := l.Append(ctx, e); err != nil {
					t.Fatalf("Append: %v", err)
				}
			}
		}
		got, err := l.ReadAll(ctx, "n", id)
		if err != nil {
			t.Fatalf("ReadAll round %d: %v", round, err)
		}
		if err := bustest.Same(es, got); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		l.Close()
		b.Close()
	}
}

func FuzzDecodeMsg(f *testing.F) {
	good, _ := events.Marshal(events.New(1, "n", "sb", 1, events.ExecCompleted, events.ExecCompletedPayload{Seq: 1}))
	f.Add(good)
	f.Add([]byte(`{"name":"n","sandboxId":"s","event":"nope"}`))
	f.Add([]byte(`{"name":"n","sandboxId":"s","event":"exec.nope"}`))
	f.Add([]byte("\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := bus.DecodeMsg(data, 9)
		if err != nil {
			if !errors.Is(err, events.ErrInvalidEntry) {
				t.Fatalf("DecodeMsg error %v does not wrap ErrInvalidEntry", err)
			}
			return
		}
		if e.Seq != 9 || e.Name == "" || e.SandboxID == "" || !e.Event.Valid() {
			t.Fatalf("DecodeMsg accepted %+v", e)
		}
	})
}

// TestServerGoneDuringClaim: appends to a new sandbox whose claim cannot
// succeed, because the server is gone (the publish fails at once) or its
// JetStream is (the fence is sent, the failure comes back asynchronously
// while appends queue behind the claim), fail with ErrUnavailable at Append
// or at the barrier, stay failed, and Close does not hang on the claim.
func TestServerGoneDuringClaim(t *testing.T) {
	for _, tc := range []struct {
		name string
		gone func(*server.Server)
	}{
		{"server shut down", (*server.Server).Shutdown},
		{"jetstream disabled", func(s *server.Server) { _ = s.DisableJetStream() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
				StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
			if err != nil {
				t.Fatal(err)
			}
			go s.Start()
			defer s.Shutdown()
			if !s.ReadyForConnections(10 * time.Second) {
				t.Fatal("nats server not ready")
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			b, err := bus.Open(ctx, bus.Config{URL: s.ClientURL()})
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			l, err := bus.NewLedger(b, bus.LedgerConfig{AckTimeout: 2 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			tc.gone(s)
			id := bustest.ID("gone")
			es := bustest.Entries("n", id, 1, 3)
			start := time.Now()
			err = nil
			for _, e := range es {
				if err = l.Append(ctx, e); err != nil {
					break
				}
			}
			if err == nil {
				err = l.Sync(ctx, id)
			}
			if !errors.Is(err, adapters.ErrUnavailable) {
				t.Fatalf("appends = %v, want ErrUnavailable", err)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("failure took %v, want at most about the ack timeout", d)
			}
			if err := l.Append(ctx, es[0]); !errors.Is(err, adapters.ErrUnavailable) {
				t.Errorf("next Append = %v, want ErrUnavailable", err)
			}
			done := make(chan struct{})
			go func() {
				l.Close()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("Close hangs after a failed claim")
			}
		})
	}
}
