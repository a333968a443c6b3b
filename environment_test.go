package alineo_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters"
)

func TestEnvironment(t *testing.T) {
	forEachStore(t, func(t *testing.T, store adapters.Store) {
		e := newEnv(t, store)
		ctx := testCtx(t)
		var setups atomic.Int64
		opts := alineo.EnvOptions{
			Image: "host", Resources: alineo.Resources{Memory: "256Mi"}, SetupVersion: "1",
			Setup: func(ctx context.Context, sb *alineo.Sandbox) error {
				n := setups.Add(1)
				_, err := sb.Exec(ctx, "mkdir -p /env && echo built > /env/marker && echo "+string(rune('0'+n))+" > /env/build").Wait()
				return err
			},
		}
		env := e.client.Environment("tools", opts)
		if info, err := env.Info(ctx); err != nil || info != nil {
			t.Fatalf("Info before the first build = %+v, %v; want nil", info, err)
		}

		// Concurrent first use builds once.
		const n = 3
		sbs := make([]*alineo.Sandbox, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { sbs[i], errs[i] = env.Sandbox(ctx) })
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("Sandbox %d: %v", i, errs[i])
			}
			closeLater(t, sbs[i])
			if got := out(t, ctx, sbs[i], "cat /env/marker /env/build"); got != "built\n1\n" {
				t.Fatalf("spawned sandbox %d sees %q", i, got)
			}
			if !strings.HasPrefix(sbs[i].Name(), "env-tools-") {
				t.Errorf("name = %s, want env-tools-…", sbs[i].Name())
			}
			if p := created(t, store, sbs[i]); p.FromEnvironment != "tools" || p.SnapshotID == "" || p.RunID != sbs[i].RunID() {
				t.Errorf("sandbox.created = %+v", p)
			}
		}
		if got := setups.Load(); got != 1 {
			t.Fatalf("Setup ran %d times for %d concurrent first uses, want 1", got, n)
		}
		info, err := env.Info(ctx)
		if err != nil || info == nil || info.SnapshotID == "" || info.Fingerprint != opts.Fingerprint() || info.Image != opts.Image {
			t.Fatalf("Info after the build = %+v, %v", info, err)
		}

		// Again, through a new handle: restored from the snapshot, Setup not run.
		again, err := e.client.Environment("tools", opts).Sandbox(ctx)
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, again)
		if got := out(t, ctx, again, "cat /env/build"); got != "1\n" || setups.Load() != 1 {
			t.Fatalf("second Sandbox sees build %q after %d setups, want 1 and 1", got, setups.Load())
		}

		// A changed SetupVersion (the fingerprint) rebuilds.
		opts2 := opts
		opts2.SetupVersion = "2"
		if opts2.Fingerprint() == opts.Fingerprint() {
			t.Fatal("fingerprint ignores SetupVersion")
		}
		rebuilt, err := e.client.Environment("tools", opts2).Sandbox(ctx)
		if err != nil {
			t.Fatal(err)
		}
		closeLater(t, rebuilt)
		if got := out(t, ctx, rebuilt, "cat /env/build"); got != "2\n" || setups.Load() != 2 {
			t.Fatalf("after a changed fingerprint: build %q after %d setups, want 2 and 2", got, setups.Load())
		}
		info2, err := env.Info(ctx)
		if err != nil || info2.Fingerprint != opts2.Fingerprint() || info2.SnapshotID == info.SnapshotID {
			t.Fatalf("Info after the rebuild = %+v, %v", info2, err)
		}

		// Rebuild forces a build.
		if _, err := e.client.Environment("tools", opts2).Rebuild(ctx); err != nil || setups.Load() != 3 {
			t.Fatalf("Rebuild = %v after %d setups, want nil and 3", err, setups.Load())
		}

		// A failing Setup saves nothing.
		boom := errors.New("boom")
		bad := e.client.Environment("broken", alineo.EnvOptions{Image: "host",
			Setup: func(context.Context, *alineo.Sandbox) error { return boom }})
		if _, err := bad.Sandbox(ctx); !errors.Is(err, boom) {
			t.Fatalf("Sandbox with a failing Setup = %v, want boom", err)
		}
		if info, err := bad.Info(ctx); err != nil || info != nil {
			t.Fatalf("Info after a failed build = %+v, %v; want nil", info, err)
		}

		recs, err := e.client.Environments().List(ctx)
		if err != nil || len(recs) != 1 || recs[0].Name != "tools" {
			t.Fatalf("Environments().List = %+v, %v", recs, err)
		}
		if err := e.client.Environments().Delete(ctx, "tools"); err != nil {
			t.Fatal(err)
		}
		if info, err := env.Info(ctx); err != nil || info != nil {
			t.Fatalf("Info after Delete = %+v, %v; want nil", info, err)
		}
		if _, err := e.client.Environment("", opts).Sandbox(ctx); !errors.Is(err, alineo.ErrInvalidOptions) {
			t.Fatalf("empty name: %v, want ErrInvalidOptions", err)
		}
	})
}
