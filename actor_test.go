package alineo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
)

// checkActors fails t unless every entry of sb's session carries want.
func checkActors(t *testing.T, c *Client, sb *Sandbox, want string) {
	t.Helper()
	es := rows(t, c, sb)
	if len(es) == 0 {
		t.Fatalf("no entries for %s", sb.ID())
	}
	for _, e := range es {
		if e.Actor != want {
			t.Fatalf("%s %s: actor = %q, want %q", sb.ID(), e.Event, e.Actor, want)
		}
	}
}

func TestActorOnEveryEntry(t *testing.T) {
	f := newFakeServer(t)
	f.snapState = "Ready"
	c, err := New(Options{BaseURL: f.URL, Adapter: memory.New(), Actor: "alice@laptop"})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	own, err := c.Sandbox(ctx, SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := own.Exec(ctx, "echo hi").Wait(); err != nil {
		t.Fatal(err)
	}
	if err := own.Close(ctx); err != nil {
		t.Fatal(err)
	}
	checkActors(t, c, own, "alice@laptop")

	// A service acting for a user names it per call; a fork keeps its
	// parent's actor.
	bob := WithActor(ctx, "bob via executor-3")
	sb, err := c.Sandbox(bob, SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sb.Actor(), "bob via executor-3"; got != want {
		t.Fatalf("Actor() = %q, want %q", got, want)
	}
	if _, err := sb.Exec(ctx, "echo hi").Wait(); err != nil { // a plain ctx later changes nothing
		t.Fatal(err)
	}
	child, err := sb.Fork(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := child.Exec(ctx, "echo child").Wait(); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*Sandbox{child, sb} {
		if err := h.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	checkActors(t, c, sb, "bob via executor-3")
	checkActors(t, c, child, "bob via executor-3")
}

func TestDefaultActor(t *testing.T) {
	f := newFakeServer(t)
	c := newFakeClient(t, f, nil)
	a := DefaultActor()
	if !strings.Contains(a, "@") || events.ValidateActor(a) != nil {
		t.Fatalf("DefaultActor() = %q, want a valid user@host", a)
	}
	sb, err := c.Sandbox(context.Background(), SandboxOptions{Image: "ubuntu"})
	if err != nil {
		t.Fatal(err)
	}
	if err := sb.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkActors(t, c, sb, a)
}

func TestInvalidActorIsAnOptionError(t *testing.T) {
	f := newFakeServer(t)
	long := strings.Repeat("a", events.MaxActorLen+1)
	if _, err := New(Options{BaseURL: f.URL, Adapter: memory.New(), Actor: long}); !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("New with a %d-byte actor = %v, want ErrInvalidOptions", len(long), err)
	}
	c := newFakeClient(t, f, nil)
	_, err := c.Sandbox(WithActor(context.Background(), "bad\xff"), SandboxOptions{Image: "ubuntu"})
	var oe *OptionError
	if !errors.As(err, &oe) || !errors.Is(err, ErrInvalidOptions) {
		t.Fatalf("Sandbox under an invalid actor = %v, want an *OptionError", err)
	}
	if n := f.live(); n != 0 {
		t.Fatalf("%d sandboxes created under an invalid actor", n)
	}
}
