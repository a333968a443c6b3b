package bus_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/bus/bustest"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/testenv"
)

// requests counts the requests made on subject (a wildcard), from any
// connection of the server nc is connected to.
func requests(t *testing.T, nc *nats.Conn, subject string) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	sub, err := nc.Subscribe(subject, func(*nats.Msg) { n.Add(1) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return &n
}

// TestReadWithoutDirectGets: a ledger stream that exists without direct
// gets keeps them off when a bus opens it without UpdateStreams, and its
// sessions are read with an ordered consumer; with UpdateStreams they are
// turned on and reads use them.
func TestReadWithoutDirectGets(t *testing.T) {
	ctx := context.Background()
	url := testenv.NATS(t)
	open := func(cfg bus.Config) *bus.Bus {
		t.Helper()
		cfg.URL = url
		b, err := bus.Open(ctx, cfg)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	first := open(bus.Config{})
	sc := first.StreamConfig()
	sc.AllowDirect = false // as an older release created it
	if _, err := first.JetStream().UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	id := bustest.ID("nodirect")
	es := bustest.Entries("n", id, 50, 20)
	for _, tt := range []struct {
		name   string
		update bool
		direct bool
	}{
		{"kept off", false, false},
		{"turned on by UpdateStreams", true, true},
		{"kept on", false, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			b := open(bus.Config{UpdateStreams: tt.update})
			si, err := b.Stream().Info(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if si.Config.AllowDirect != tt.direct {
				t.Fatalf("AllowDirect = %v, want %v", si.Config.AllowDirect, tt.direct)
			}
			l, err := bus.NewLedger(b, bus.LedgerConfig{})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if tt.name == "kept off" {
				if err := l.AppendBatch(ctx, es); err != nil {
					t.Fatal(err)
				}
			}
			consumers := requests(t, b.Conn(), "$JS.API.CONSUMER.CREATE.>")
			directs := requests(t, b.Conn(), "$JS.API.DIRECT.GET.>")
			got, err := l.ReadAll(ctx, "n", id)
			if err != nil {
				t.Fatalf("ReadAll: %v", err)
			}
			if err := bustest.Same(es, got); err != nil {
				t.Fatalf("ReadAll: %v", err)
			}
			if err := b.Conn().Flush(); err != nil {
				t.Fatal(err)
			}
			if c, d := consumers.Load(), directs.Load(); tt.direct != (d > 0 && c == 0) {
				t.Errorf("read made %d consumers and %d direct gets; want direct gets only: %v", c, d, tt.direct)
			}
		})
	}
}

// TestReadDirectCluster: on an R3 stream of a 3-node cluster, sessions
// read through each node (whose replica answers its direct gets first),
// right after they were written, are whole and in order; and a writer on
// each node in turn takes a sandbox over (a fence read from the leader)
// and appends to it.
func TestReadDirectCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster: not with -short")
	}
	ctx := context.Background()
	c := testenv.StartNATSCluster(t, 3)
	urls := c.URLs()
	open := func(url string) *bus.Bus {
		t.Helper()
		b, err := bus.Open(ctx, bus.Config{URL: url, Replicas: 3})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	w := open(strings.Join(urls, ","))
	wl, err := bus.NewLedger(w, bus.LedgerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Close()
	ids := []string{bustest.ID("r3a"), bustest.ID("r3b")}
	sessions := map[string][]events.Entry{}
	readers := make([]*bus.Ledger, len(urls))
	for i, url := range urls {
		if readers[i], err = bus.NewLedger(open(url), bus.LedgerConfig{}); err != nil {
			t.Fatal(err)
		}
		defer readers[i].Close()
	}
	for round := range 3 {
		for _, id := range ids {
			es := bustest.Entries("n", id, 100, 20)
			es = es[:len(es)-1] // no close
			if round > 0 {
				es = es[1:] // no second creation
			}
			if err := wl.AppendBatch(ctx, es); err != nil {
				t.Fatal(err)
			}
			sessions[id] = append(sessions[id], es...)
		}
		for i, rl := range readers {
			for _, id := range ids {
				got, err := rl.ReadAll(ctx, "n", id)
				if err != nil {
					t.Fatalf("round %d, node %d: ReadAll: %v", round, i, err)
				}
				if err := bustest.Same(sessions[id], got); err != nil {
					t.Fatalf("round %d, node %d: ReadAll: %v", round, i, err)
				}
			}
		}
	}
	for i, rl := range readers {
		if _, err := rl.Takeover(ctx, ids[0]); err != nil {
			t.Fatalf("node %d: Takeover: %v", i, err)
		}
		e := events.New(time.Now().UnixMilli(), "n", ids[0], 1000+i, events.ExecStarted, events.ExecStartedPayload{Seq: 1000 + i, Kind: events.KindCommand, Cmd: "true"})
		if err := rl.AppendBatch(ctx, []events.Entry{e}); err != nil {
			t.Fatalf("node %d: append after Takeover: %v", i, err)
		}
		sessions[ids[0]] = append(sessions[ids[0]], e)
	}
	got, err := readers[0].ReadAll(ctx, "n", ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := bustest.Same(sessions[ids[0]], got); err != nil {
		t.Fatalf("after takeovers: %v", err)
	}
}
