package alineo_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/opensandbox"
	"github.com/alineo-labs/alineo/sandboxd"
	"github.com/alineo-labs/alineo/testenv"
)

// lastClosed returns the payload of the sandbox.closed that ends sb's
// session, failing the test when the session does not end with one.
func lastClosed(t *testing.T, store *memory.Store, sb *alineo.Sandbox) (events.SandboxClosedPayload, []byte) {
	t.Helper()
	es, err := store.ReadAll(context.Background(), sb.Name(), sb.ID())
	if err != nil {
		t.Fatal(err)
	}
	if len(es) == 0 || es[len(es)-1].Event != events.SandboxClosed {
		t.Fatalf("session %s/%s does not end with sandbox.closed (%d entries)", sb.Name(), sb.ID(), len(es))
	}
	last := es[len(es)-1]
	var p events.SandboxClosedPayload
	if len(last.Payload) > 0 {
		if err := last.Decode(&p); err != nil {
			t.Fatal(err)
		}
	}
	return p, last.Payload
}

// TestCloseRecordsExpiry: a sandbox whose expiration passed is ended by its
// server; Close then records sandbox.closed with outcome expired, not a
// plain close. A sandbox Close deletes is recorded as before, with no
// payload.
func TestCloseRecordsExpiry(t *testing.T) {
	ctx := context.Background()
	url, _ := testenv.SandboxdServer(t, sandboxd.Config{SweepInterval: 50 * time.Millisecond})
	store := memory.New()
	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: store})
	if err != nil {
		t.Fatal(err)
	}

	// Created without a Timeout: no expiration, which a renewal may set to
	// any time (the protocol's 60 s minimum holds for a create only).
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
	if err != nil {
		t.Fatal(err)
	}
	if got := sb.ExpiresAt(); !got.IsZero() {
		t.Errorf("ExpiresAt = %v, want zero without a Timeout", got)
	}
	want := time.Now().Add(time.Second)
	got, err := sb.Renew(ctx, want)
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Sub(want); d < -time.Second || d > time.Second || !sb.ExpiresAt().Equal(got) {
		t.Fatalf("Renew = %v, ExpiresAt = %v; want about %v", got, sb.ExpiresAt(), want)
	}
	testenv.Eventually(t, 10*time.Second, func() error {
		s, err := client.OpenSandbox().GetSandbox(ctx, sb.ID())
		if err != nil {
			return err
		}
		if s.Status.State != opensandbox.StateTerminated {
			return fmt.Errorf("sandbox %s", s.Status.State)
		}
		return nil
	})
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if p, raw := lastClosed(t, store, sb); p.Outcome != events.OutcomeExpired {
		t.Errorf("sandbox.closed payload %s, want outcome %q", raw, events.OutcomeExpired)
	}

	// Renewed but alive when closed: deleted, recorded with no payload.
	live, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Timeout: alineo.MinTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if exp := live.ExpiresAt(); time.Until(exp) < 50*time.Second || time.Until(exp) > 70*time.Second {
		t.Errorf("ExpiresAt = %v, want about a minute from now (Timeout %v)", exp, alineo.MinTimeout)
	}
	if _, err := live.Renew(ctx, time.Now().Add(2*time.Minute)); err != nil {
		t.Fatal(err)
	}
	if err := live.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, raw := lastClosed(t, store, live); raw != nil {
		t.Errorf("sandbox.closed payload %s, want none for a deleted sandbox", raw)
	}
}

// TestRenewErrors: a renewal that does not move the expiration later, or of
// a sandbox that is gone, fails with the server's error.
func TestRenewErrors(t *testing.T) {
	ctx := context.Background()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Timeout: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before := sb.ExpiresAt()
	_, err = sb.Renew(ctx, time.Now().Add(time.Minute))
	var se *alineo.SandboxError
	if !errors.As(err, &se) || !errors.Is(err, opensandbox.ErrBadRequest) || se.SandboxID != sb.ID() {
		t.Errorf("renew to an earlier time: %v, want a *SandboxError wrapping 400", err)
	}
	if !sb.ExpiresAt().Equal(before) {
		t.Errorf("ExpiresAt = %v after a failed renewal, want %v kept", sb.ExpiresAt(), before)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Renew(ctx, time.Now().Add(time.Hour)); !errors.Is(err, opensandbox.ErrNotFound) {
		t.Errorf("renew after Close: %v, want not found", err)
	}
}

// TestResumeTimeout: ResumeOptions.Timeout gives the restored sandbox an
// expiration, checked as SandboxOptions.Timeout is.
func TestResumeTimeout(t *testing.T) {
	ctx := context.Background()
	client, err := alineo.New(alineo.Options{BaseURL: testenv.Sandboxd(t), Adapter: memory.New()})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sb.Checkpoint(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(ctx); err != nil {
		t.Fatal(err)
	}
	var oe *alineo.OptionError
	if _, err := client.Resume(ctx, sb.ID(), alineo.ResumeOptions{Name: sb.Name(), Timeout: 10 * time.Second}); !errors.As(err, &oe) || oe.Field != "Timeout" {
		t.Errorf("resume with a 10 s timeout: %v, want *OptionError on Timeout", err)
	}
	r, err := client.Resume(ctx, sb.ID(), alineo.ResumeOptions{Name: sb.Name(), Timeout: 90 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close(ctx)
	if exp := r.ExpiresAt(); time.Until(exp) < 80*time.Second || time.Until(exp) > 100*time.Second {
		t.Errorf("resumed ExpiresAt = %v, want about 90 s from now", exp)
	}
	s, err := client.OpenSandbox().GetSandbox(ctx, r.ID())
	if err != nil {
		t.Fatal(err)
	}
	if s.ExpiresAt == nil || !s.ExpiresAt.Equal(r.ExpiresAt()) {
		t.Errorf("server's expiresAt = %v, handle's %v", s.ExpiresAt, r.ExpiresAt())
	}
}
