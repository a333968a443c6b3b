package alineo_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/testenv"
)

// TestCredentialsNeverOnTheBus runs the SDK on a bus.Ledger with a projector
// into SQLite, has commands print a bound value, and searches every message of
// the stream (raw and decoded) and every byte of the projection for it.
func TestCredentialsNeverOnTheBus(t *testing.T) {
	b, err := bus.Open(context.Background(), bus.Config{URL: testenv.NATS(t)})
	if err != nil {
		t.Fatalf("bus.Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	path := testenv.SQLitePath(t)
	rm, err := sqlite.Open(path, sqlite.Config{Synchronous: "NORMAL"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rm.Close() })
	p := &projections.Projector{Bus: b, Store: rm, BatchWait: 5 * time.Millisecond}
	pctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(pctx) }()
	t.Cleanup(func() { cancel(); <-done })
	l, err := bus.NewLedger(b, bus.LedgerConfig{Projection: rm})
	if err != nil {
		t.Fatalf("NewLedger: %v", err)
	}
	e := newEgressEnv(t, l, func(o *alineo.Options) { o.ReadModel = rm })
	ctx := testCtx(t)

	sb := e.sandbox(t, ctx, alineo.SandboxOptions{CredentialProxy: true, NetworkPolicy: &alineo.NetworkPolicy{
		DefaultAction: alineo.EgressDeny,
		Egress:        []alineo.EgressRule{{Action: alineo.EgressAllow, Target: "allowed.test"}},
	}})
	secret := newSecret(t)
	if err := sb.Credentials().Set(ctx, "api", secret, alineo.CredentialBinding{Hosts: []string{"allowed.test"},
		Schemes: []string{"http"}, Ports: []int{e.plain.port}, Type: alineo.CredentialBearer}, ""); err != nil {
		t.Fatalf("Set: %v", err)
	}
	if res, err := sb.Exec(ctx, "echo "+secret+" >&2; echo "+secret, alineo.ExecOptions{Env: map[string]string{"X": secret}}).Wait(); err != nil ||
		res.Stdout != "[REDACTED:api]\n" || res.Stderr != "[REDACTED:api]\n" {
		t.Fatalf("echo = %+v, %v", res, err)
	}
	half := len(secret) / 2
	code := fmt.Sprintf("printf %s; sleep 0.3; printf %s", secret[:half], secret[half:])
	if res, err := sb.ExecCode(ctx, code, alineo.CodeOptions{Language: "bash"}).Wait(); err != nil || res.Stdout != "[REDACTED:api]" {
		t.Fatalf("split output = %q, %v", res.Stdout, err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}

	// Every message of the stream, raw.
	info, err := b.Stream().Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := b.Msg(ctx, seq)
		if err != nil {
			continue // deleted
		}
		if bytes.Contains(m.Data, []byte(secret)) || strings.Contains(fmt.Sprint(m.Header), secret) {
			t.Fatalf("stream message %d (%s) holds the value", seq, m.Subject)
		}
	}
	// Decoded: a rebuild of the stream.
	rebuilt := memory.New()
	if _, err := projections.Rebuild(ctx, b, rebuilt, nil); err != nil {
		t.Fatalf("Rebuild: %v", err)
	}
	es, err := rebuilt.ReadAll(ctx, sb.Name(), sb.ID())
	if err != nil || len(es) == 0 {
		t.Fatalf("rebuilt session: %d entries, %v", len(es), err)
	}
	var marker bool
	for _, en := range es {
		if bytes.Contains(en.Payload, []byte(secret)) {
			t.Fatalf("decoded %s holds the value", en.Event)
		}
		marker = marker || bytes.Contains(en.Payload, []byte("[REDACTED:api]"))
	}
	if !marker {
		t.Fatal("no decoded entry holds the redaction marker")
	}
	// The projection, once it caught up: every byte of its files.
	testenv.Eventually(t, 10*time.Second, func() error {
		got, err := rm.ReadAll(ctx, sb.Name(), sb.ID())
		if err != nil {
			return err
		}
		if len(got) != len(es) {
			return fmt.Errorf("projection has %d entries, want %d", len(got), len(es))
		}
		return nil
	})
	files, _ := filepath.Glob(filepath.Join(filepath.Dir(path), "*"))
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(data, []byte(secret)) {
			t.Fatalf("projection file %s holds the value", filepath.Base(f))
		}
	}
}
