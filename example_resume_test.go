package alineo_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"strings"

	"github.com/alineo-labs/alineo"
)

func ExampleSandbox_Checkpoint() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	defer sb.Close(ctx)

	if _, err := sb.Exec(ctx, "echo installed > /dep").Wait(); err != nil {
		log.Fatal(err)
	}
	snapshotID, err := sb.Checkpoint(ctx, "after-install")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(snapshotID != "")
	// Output: true
}

func ExampleSandbox_ListCheckpoints() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)

	for _, tag := range []string{"first", "second"} {
		if _, err := sb.Checkpoint(ctx, tag); err != nil {
			log.Fatal(err)
		}
	}
	cps, err := sb.ListCheckpoints(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, c := range cps {
		fmt.Println(c.Tag)
	}
	// Output:
	// first
	// second
}

func ExampleClient_Resume() {
	ctx := context.Background()
	client := newClient()

	// The first run: an install, a checkpoint, then a step that never finishes
	// (the process dies).
	sb := newSandbox(ctx, client)
	defer sb.Close(ctx)
	if _, err := sb.Exec(ctx, "echo installed > /dep && echo install done").Wait(); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Checkpoint(ctx, "after-install"); err != nil {
		log.Fatal(err)
	}

	// Later, maybe in another process: resume from the last checkpoint.
	resumed, err := client.Resume(ctx, sb.ID(), alineo.ResumeOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer resumed.Close(ctx)
	// The same first call is replayed from the ledger: nothing runs.
	res, err := resumed.Exec(ctx, "echo installed > /dep && echo install done").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print("replayed: ", res.Stdout)
	// The next one runs live on the restored filesystem.
	res, err = resumed.Exec(ctx, "cat /dep").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print("live: ", res.Stdout)

	// A call that differs from the recorded one fails instead of replaying it.
	other, err := client.Resume(ctx, sb.ID(), alineo.ResumeOptions{Tag: "after-install"})
	if err != nil {
		log.Fatal(err)
	}
	defer other.Close(ctx)
	_, err = other.Exec(ctx, "rm -rf /dep").Wait()
	fmt.Println(errors.Is(err, alineo.ErrReplayDiverged))
	// Output:
	// replayed: install done
	// live: installed
	// true
}

func ExampleClient_RestoreSnapshot() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	if _, err := sb.Exec(ctx, "echo data > /kept").Wait(); err != nil {
		log.Fatal(err)
	}
	snapshotID, err := sb.Checkpoint(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	sb.Close(ctx)

	// A new sandbox from the snapshot, with a clean history.
	restored, err := client.RestoreSnapshot(ctx, snapshotID, "my-sandbox", alineo.Resources{CPU: "500m", Memory: "256Mi"})
	if err != nil {
		log.Fatal(err)
	}
	defer restored.Close(ctx)
	ex := restored.Exec(ctx, "cat /kept")
	res, err := ex.Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	fmt.Println(restored.Name(), ex.Step())
	// Output:
	// data
	// my-sandbox 1
}

func ExampleClient_Connect() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	defer sb.Close(ctx)

	// Attach to the running sandbox by id, e.g. from another process.
	attached, err := client.Connect(ctx, sb.ID(), "attached", alineo.ConnectOptions{})
	if err != nil {
		log.Fatal(err)
	}
	res, err := attached.Exec(ctx, "echo hello").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	// Without ConnectOptions.Resources the handle cannot fork.
	_, err = attached.Fork(ctx, "")
	fmt.Println(errors.Is(err, alineo.ErrForkUnsupported))
	// Output:
	// hello
	// true
}

func ExampleSandbox_Fork() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	if _, err := sb.Exec(ctx, "echo installed > /dep").Wait(); err != nil {
		log.Fatal(err)
	}

	fork, err := sb.Fork(ctx, "after-install")
	if err != nil {
		log.Fatal(err)
	}
	defer fork.Close(ctx)
	// Both run on from the same filesystem, independently.
	if _, err := fork.Exec(ctx, "echo fork > /who").Wait(); err != nil {
		log.Fatal(err)
	}
	if _, err := sb.Exec(ctx, "echo parent > /who").Wait(); err != nil {
		log.Fatal(err)
	}
	a, _ := fork.Exec(ctx, "cat /dep /who").Wait()
	b, _ := sb.Exec(ctx, "cat /dep /who").Wait()
	fmt.Print(a.Stdout, b.Stdout)
	fmt.Println(fork.RunID() == sb.RunID(), strings.HasPrefix(fork.Name(), "fork-"))
	// Output:
	// installed
	// fork
	// installed
	// parent
	// true true
}

func ExampleSandbox_Fork_options() {
	ctx := context.Background()
	client := newClient()
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Env: map[string]string{"STAGE": "build"}})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)

	// The TypeScript SDK's sb.fork(tag, runId), with the fork's own
	// resources and env (over the parent's, which the fork keeps).
	fork, err := sb.Fork(ctx, "before-tests", alineo.ForkOptions{
		RunID:     "tests-run",
		Resources: alineo.Resources{Memory: "256Mi"},
		Env:       map[string]string{"SHARD": "2"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer fork.Close(ctx)
	res, err := fork.Exec(ctx, `echo "$STAGE $SHARD"`).Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	fmt.Println(fork.RunID())
	// Output:
	// build 2
	// tests-run
}

func ExampleClient_RestoreSnapshot_options() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	snapshotID, err := sb.Checkpoint(ctx, "")
	if err != nil {
		log.Fatal(err)
	}
	sb.Close(ctx)

	// The TypeScript SDK's restoreSnapshot(snapshotId, name, resources, runId).
	restored, err := client.RestoreSnapshot(ctx, snapshotID, "nightly", alineo.Resources{},
		alineo.RestoreOptions{RunID: "nightly-2024-05-01", Env: map[string]string{"MODE": "replay"}})
	if err != nil {
		log.Fatal(err)
	}
	defer restored.Close(ctx)
	res, err := restored.Exec(ctx, "echo $MODE").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	fmt.Println(restored.RunID())
	// Output:
	// replay
	// nightly-2024-05-01
}

func ExampleClient_Environment() {
	ctx := context.Background()
	client := newClient()
	env := client.Environment("tools", alineo.EnvOptions{
		Image: "host",
		Setup: func(ctx context.Context, sb *alineo.Sandbox) error {
			_, err := sb.Exec(ctx, "mkdir -p /opt/tools && echo v1 > /opt/tools/version").Wait()
			return err
		},
		// Bump it when Setup changes: the next Sandbox rebuilds.
		SetupVersion: "v1",
	})
	info, err := env.Info(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info == nil) // not built yet

	sb, err := env.Sandbox(ctx) // builds, then starts from the snapshot
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)
	res, err := sb.Exec(ctx, "cat /opt/tools/version").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	info, err = env.Info(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(info.Name, info.SnapshotID != "")
	// Output:
	// true
	// v1
	// tools true
}

func ExampleEnvironment_Sandbox() {
	ctx := context.Background()
	client := newClient()
	env := client.Environment("shells", alineo.EnvOptions{Image: "host", Shell: "/bin/sh"})

	// The TypeScript SDK's env.sandbox({env, shell}): each sandbox of the
	// environment with its own variables and shell.
	sb, err := env.Sandbox(ctx, alineo.EnvSandboxOptions{
		Env:   map[string]string{"WORKER": "7"},
		Shell: "/bin/bash",
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)
	res, err := sb.Exec(ctx, `echo "$0 $WORKER"`).Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	// Output: /bin/bash 7
}

func ExampleEnvironment_Rebuild() {
	ctx := context.Background()
	client := newClient()
	env := client.Environment("fresh", alineo.EnvOptions{Image: "host"})
	first, err := env.Rebuild(ctx)
	if err != nil {
		log.Fatal(err)
	}
	second, err := env.Rebuild(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.SnapshotID != second.SnapshotID)
	// Output: true
}

func ExampleEnvironments() {
	ctx := context.Background()
	client := newClient()
	if _, err := client.Environment("a", alineo.EnvOptions{Image: "host"}).Rebuild(ctx); err != nil {
		log.Fatal(err)
	}
	recs, err := client.Environments().List(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(recs), recs[0].Name)
	if err := client.Environments().Delete(ctx, "a"); err != nil {
		log.Fatal(err)
	}
	recs, _ = client.Environments().List(ctx)
	fmt.Println(len(recs))
	// Output:
	// 1 a
	// 0
}

func ExampleEnvOptions_Fingerprint() {
	v1 := alineo.EnvOptions{Image: "host", SetupVersion: "1"}
	v2 := v1
	v2.SetupVersion = "2"
	fmt.Println(v1.Fingerprint() == v2.Fingerprint())
	// Output: false
}
