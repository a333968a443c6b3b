package bus_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/testenv"
)

// TestOpenKeepsExistingStreams: a process that opens the bus without being
// told (a read-only status or verify) never changes the replicas or the
// retention an operator gave the ledger stream; one told to
// (UpdateStreams) does. On a 3-node cluster, as a fleet runs.
func TestOpenKeepsExistingStreams(t *testing.T) {
	if testing.Short() {
		t.Skip("cluster: not with -short")
	}
	c := testenv.StartNATSCluster(t, 3)
	url := strings.Join(c.URLs(), ",")
	open := func(cfg bus.Config) *bus.Bus {
		t.Helper()
		cfg.URL = url
		b, err := bus.Open(context.Background(), cfg)
		if err != nil {
			t.Fatalf("Open(%+v): %v", cfg, err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}
	check := func(b *bus.Bus, replicas int, maxAge time.Duration) {
		t.Helper()
		for _, name := range []string{bus.DefaultStream, b.DLQStream()} {
			st, err := b.JetStream().Stream(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			sc := st.CachedInfo().Config
			if sc.Replicas != replicas {
				t.Errorf("%s: replicas %d, want %d", name, sc.Replicas, replicas)
			}
			if name == bus.DefaultStream && sc.MaxAge != maxAge {
				t.Errorf("%s: max age %v, want %v", name, sc.MaxAge, maxAge)
			}
		}
	}
	b := open(bus.Config{Replicas: 3, MaxAge: 48 * time.Hour})
	check(b, 3, 48*time.Hour)
	// A command that was told nothing: R3 and 48 h stay.
	check(open(bus.Config{}), 3, 48*time.Hour)
	check(open(bus.Config{Replicas: 1}), 3, 48*time.Hour)
	// Told: the change is made.
	check(open(bus.Config{Replicas: 1, MaxAge: 24 * time.Hour, UpdateStreams: true}), 1, 24*time.Hour)
}

// TestEmbeddedNeedsToken is issue 41's F4: the embedded server requires a
// token generated for its run. A local process without it is refused; the
// URL with it is in StoreDir/nats.url, mode 0600; logs get it redacted.
func TestEmbeddedNeedsToken(t *testing.T) {
	dir := t.TempDir()
	b, err := bus.Open(context.Background(), bus.Config{StoreDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	local := b.LocalURL()
	if !strings.Contains(local, "@") {
		t.Fatalf("LocalURL %q has no token", local)
	}
	if strings.Contains(b.ClientURL(), strings.Split(strings.TrimPrefix(local, "nats://"), "@")[0]) {
		t.Errorf("ClientURL %q shows the token", b.ClientURL())
	}
	plain := "nats://" + strings.Split(local, "@")[1]
	if nc, err := nats.Connect(plain, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatalf("a connection without the token to %s was accepted", plain)
	} else if !errors.Is(err, nats.ErrAuthorization) && !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("without the token: %v, want an authorization error", err)
	}
	nc, err := nats.Connect(local)
	if err != nil {
		t.Fatalf("with the token: %v", err)
	}
	nc.Close()
	fi, err := os.Stat(filepath.Join(dir, "nats.url"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("nats.url mode %o, want 600", fi.Mode().Perm())
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "nats.url")); strings.TrimSpace(string(got)) != local {
		t.Errorf("nats.url holds %q, want %q", got, local)
	}
}
