package alineo_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/memory"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/sandboxd"
)

// The examples share one embedded sandboxd, started on first use and closed by
// TestMain.
var example struct {
	once sync.Once
	srv  *sandboxd.Server
	url  string
}

func exampleServerURL() string {
	example.once.Do(func() {
		ctx := context.Background()
		cfg := sandboxd.Config{NoIsolation: os.Getenv("ALINEO_SANDBOXD_NO_ISOLATION") == "1"}
		for {
			srv, err := sandboxd.Open(context.Background(), cfg)
			if err != nil {
				log.Fatal(err)
			}
			url, err := srv.Start(ctx)
			if errors.Is(err, sandboxd.ErrIsolationUnavailable) && !cfg.NoIsolation {
				srv.Close(ctx)
				cfg.NoIsolation = true // examples only: this kernel has no namespaces
				continue
			}
			if err != nil {
				log.Fatal(err)
			}
			example.srv, example.url = srv, url
			return
		}
	})
	return example.url
}

func closeExampleServer() {
	if example.srv != nil {
		example.srv.Close(context.Background())
	}
}

// newClient returns a client on the shared embedded sandboxd with an in-memory ledger.
func newClient() *alineo.Client {
	client, err := alineo.New(alineo.Options{BaseURL: exampleServerURL(), Adapter: memory.New()})
	if err != nil {
		log.Fatal(err)
	}
	return client
}

// newSandbox returns a fresh sandbox; the caller closes it.
func newSandbox(ctx context.Context, client *alineo.Client) *alineo.Sandbox {
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
	if err != nil {
		log.Fatal(err)
	}
	return sb
}

func ExampleNew() {
	ctx := context.Background()
	// Without an OpenSandbox server, run sandboxd in-process and pass its URL.
	srv, err := sandboxd.Open(context.Background(), sandboxd.Config{NoIsolation: os.Getenv("ALINEO_SANDBOXD_NO_ISOLATION") == "1"})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close(ctx)
	url, err := srv.Start(ctx)
	if errors.Is(err, sandboxd.ErrIsolationUnavailable) {
		url = exampleServerURL() // this kernel has no namespaces
	} else if err != nil {
		log.Fatal(err)
	}

	client, err := alineo.New(alineo.Options{BaseURL: url, Adapter: memory.New(), MaxConcurrency: 10})
	if err != nil {
		log.Fatal(err)
	}
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)
	if err := sb.Exec(ctx, `echo "hello world"`).Pipe(os.Stdout); err != nil {
		log.Fatal(err)
	}

	_, err = alineo.New(alineo.Options{BaseURL: url}) // no adapter
	fmt.Println(err)
	// Output:
	// hello world
	// alineo: invalid option Adapter: is nil; pass a storage adapter (memory, sqlite, postgres)
}

func ExampleClient_Sandbox() {
	ctx := context.Background()
	client := newClient()
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{
		Image:     "host",
		Resources: alineo.Resources{CPU: "500m", Memory: "512Mi"},
		Name:      "my-run",
		Env:       map[string]string{"GREETING": "hi"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)
	res, err := sb.Exec(ctx, `echo "$GREETING from the sandbox"`).Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(sb.Name(), ": ", res.Stdout)
	// Output: my-run: hi from the sandbox
}

func ExampleSandbox_ID() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	fmt.Println(sb.ID() != "", sb.Name() == "sandbox-"+sb.ID()[:8])
	// Output: true true
}

func ExampleSandbox_Name() {
	ctx := context.Background()
	sb, err := newClient().Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "nightly-build"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)
	fmt.Println(sb.Name())
	// Output: nightly-build
}

func ExampleSandbox_Exec() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)

	res, err := sb.Exec(ctx, "pwd; echo $MODE", alineo.ExecOptions{Cwd: "/tmp", Env: map[string]string{"MODE": "test"}}).Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)

	// A non-zero exit is a *CommandError unless Strict is false.
	_, err = sb.Exec(ctx, "exit 42").Wait()
	var ce *alineo.CommandError
	fmt.Println(errors.As(err, &ce), ce.ExitCode)
	res, _ = sb.Exec(ctx, "exit 42", alineo.ExecOptions{Strict: new(false)}).Wait()
	fmt.Println(res.ExitCode)

	// With a Shell, the command reaches it unchanged, whatever its quoting.
	script := "set -euo pipefail\nwords=(one 'two three')\necho \"${#words[@]} words: ${words[1]}\""
	res, err = sb.Exec(ctx, script, alineo.ExecOptions{Shell: "/bin/bash"}).Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	// Output:
	// /tmp
	// test
	// true 42
	// 42
	// 2 words: two three
}

func ExampleSandbox_ExecCode() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	// Without a Language the code runs as a shell script.
	res, err := sb.ExecCode(ctx, "x=6; echo $((x * 7))").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Stdout)
	// Output: 42
}

func ExampleExec_Wait() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	res, err := sb.Exec(ctx, "echo out; echo err >&2").Wait()
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("stdout %q, stderr %q, exit %d\n", res.Stdout, res.Stderr, res.ExitCode)
	// Output: stdout "out\n", stderr "err\n", exit 0
}

func ExampleExec_Pipe() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	if err := sb.Exec(ctx, "for i in 1 2 3; do echo step $i; done").Pipe(os.Stdout); err != nil {
		log.Fatal(err)
	}
	// Output:
	// step 1
	// step 2
	// step 3
}

func ExampleExec_Stdout() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	// A chunk is one or more lines, recorded in the ledger before it is yielded.
	for chunk, err := range sb.Exec(ctx, "echo a; echo b").Stdout() {
		if err != nil {
			log.Fatal(err)
		}
		os.Stdout.Write(chunk)
	}
	// Output:
	// a
	// b
}

func ExampleExec_Stderr() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	ex := sb.Exec(ctx, "echo warning >&2; exit 3")
	for chunk, err := range ex.Stderr() {
		if err != nil {
			fmt.Println("error:", err.(*alineo.CommandError).ExitCode)
			break
		}
		fmt.Printf("%q\n", chunk)
	}
	// Output:
	// "warning\n"
	// error: 3
}

func ExampleSandbox_WriteFile() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	if err := sb.WriteFile(ctx, "/workspace/hello.txt", []byte("hello\n")); err != nil {
		log.Fatal(err)
	}
	res, _ := sb.Exec(ctx, "cat /workspace/hello.txt").Wait()
	fmt.Print(res.Stdout)
	// Output: hello
}

func ExampleSandbox_ReadFile() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	if _, err := sb.Exec(ctx, "echo generated > /tmp/out.txt").Wait(); err != nil {
		log.Fatal(err)
	}
	b, err := sb.ReadFile(ctx, "/tmp/out.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(b))
	// Output: generated
}

func ExampleSandbox_MoveFile() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	_ = sb.WriteFile(ctx, "/tmp/a.txt", []byte("x"))
	if err := sb.MoveFile(ctx, "/tmp/a.txt", "/tmp/b.txt"); err != nil {
		log.Fatal(err)
	}
	b, _ := sb.ReadFile(ctx, "/tmp/b.txt")
	fmt.Println(string(b))
	// Output: x
}

func ExampleSandbox_DeleteFile() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	_ = sb.WriteFile(ctx, "/tmp/a.txt", []byte("x"))
	if err := sb.DeleteFile(ctx, "/tmp/a.txt"); err != nil {
		log.Fatal(err)
	}
	_, err := sb.ReadFile(ctx, "/tmp/a.txt")
	var apiErr *alineo.APIError
	fmt.Println(errors.As(err, &apiErr), apiErr.Status)
	// Output: true 404
}

func ExampleSandbox_CreateDirectory() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	if err := sb.CreateDirectory(ctx, "/workspace/a/b"); err != nil {
		log.Fatal(err)
	}
	fi, _ := sb.GetFileInfo(ctx, "/workspace/a/b")
	fmt.Println(fi.Type, fi.Mode)
	// Output: directory -rwxr-xr-x
}

func ExampleSandbox_DeleteDirectory() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	_ = sb.WriteFile(ctx, "/workspace/a/b/c.txt", []byte("x"))
	if err := sb.DeleteDirectory(ctx, "/workspace/a"); err != nil {
		log.Fatal(err)
	}
	res, _ := sb.Exec(ctx, "test -e /workspace/a && echo exists || echo gone").Wait()
	fmt.Print(res.Stdout)
	// Output: gone
}

func ExampleSandbox_GetFileInfo() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	_ = sb.WriteFile(ctx, "/tmp/a.txt", []byte("12345"))
	fi, err := sb.GetFileInfo(ctx, "/tmp/a.txt")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(fi.Path, fi.Type, fi.Size)
	// Output: /tmp/a.txt file 5
}

func ExampleSandbox_ReplaceInFiles() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	_ = sb.WriteFile(ctx, "/tmp/conf", []byte("debug=false\n"))
	err := sb.ReplaceInFiles(ctx, alineo.Replacement{Path: "/tmp/conf", Old: "false", New: "true"})
	if err != nil {
		log.Fatal(err)
	}
	b, _ := sb.ReadFile(ctx, "/tmp/conf")
	fmt.Print(string(b))
	// Output: debug=true
}

func ExampleSandbox_Transfer() {
	ctx := context.Background()
	client := newClient()
	src, dst := newSandbox(ctx, client), newSandbox(ctx, client)
	defer src.Close(ctx)
	defer dst.Close(ctx)
	_ = src.WriteFile(ctx, "/tmp/artifact.bin", []byte("build output"))
	if err := src.Transfer(ctx, "/tmp/artifact.bin", dst); err != nil {
		log.Fatal(err)
	}
	b, _ := dst.ReadFile(ctx, "/tmp/artifact.bin")
	fmt.Println(string(b))
	// Output: build output
}

func ExampleSandbox_SearchFiles() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	for _, p := range []string{"/src/a.ts", "/src/lib/b.ts", "/src/c.js"} {
		_ = sb.WriteFile(ctx, p, []byte("x"))
	}
	found, err := sb.SearchFiles(ctx, "*.ts", "/src")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(found)
	// Output: [/src/a.ts /src/lib/b.ts]
}

func ExampleSandbox_ListDirectory() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	_ = sb.WriteFile(ctx, "/src/a.txt", []byte("x"))
	_ = sb.CreateDirectory(ctx, "/src/lib")
	list, err := sb.ListDirectory(ctx, "/src")
	if err != nil {
		log.Fatal(err)
	}
	for _, fi := range list {
		fmt.Println(fi.Path, fi.Type)
	}
	// Output:
	// /src/a.txt file
	// /src/lib directory
}

func ExampleSandbox_Proxy() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	p, err := sb.Proxy(ctx, 3000)
	if err != nil {
		log.Fatal(err)
	}
	// Send p.Headers with every request to p.URL.
	fmt.Println(strings.HasPrefix(p.URL, "http://"))
	// Output: true
}

func ExampleSandbox_Metrics() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	m, err := sb.Metrics(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(m.CPUCount > 0, m.Memory >= 0, !m.Timestamp.IsZero())
	// Output: true true true
}

func ExampleSandbox_Pause() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	if err := sb.Pause(ctx); err != nil {
		log.Fatal(err)
	}
	_, err := sb.Exec(ctx, "echo hi").Wait()
	fmt.Println(errors.Is(err, alineo.ErrPaused))
	if err := sb.Resume(ctx); err != nil {
		log.Fatal(err)
	}
	res, _ := sb.Exec(ctx, "echo back").Wait()
	fmt.Print(res.Stdout)
	// Output:
	// true
	// back
}

func ExampleSandbox_Close() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	sleeper := sb.Exec(ctx, "sleep 60")
	fmt.Println(sb.Close(ctx)) // cancels the running command
	fmt.Println(sb.Close(ctx)) // idempotent
	_, err := sleeper.Wait()
	fmt.Println(errors.Is(err, alineo.ErrClosed))
	es, _ := client.Sandboxes().Events(ctx, sb.Name(), sb.ID())
	fmt.Println(es[len(es)-1].Event)
	// Output:
	// <nil>
	// <nil>
	// true
	// sandbox.closed
}

func ExampleClient_Sandboxes() {
	ctx := context.Background()
	client := newClient()
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "ci-job", RunID: "run-1"})
	if err != nil {
		log.Fatal(err)
	}
	_, _ = sb.Exec(ctx, "echo hello").Wait()
	_ = sb.Close(ctx)

	es, _ := client.Sandboxes().Events(ctx, "ci-job", sb.ID())
	for _, e := range es {
		fmt.Println(e.StepIndex, e.Event)
	}
	d, _ := client.Sandboxes().Get(ctx, "ci-job", sb.ID())
	fmt.Println(d.Status, d.ExecCount, d.RunID)
	// Output:
	// -1 sandbox.created
	// 1 exec.started
	// 1 exec.output
	// 1 exec.completed
	// -1 sandbox.closed
	// completed 1 run-1
}

func ExampleSandboxes_List() {
	ctx := context.Background()
	client := newClient()
	for _, name := range []string{"first", "second"} {
		sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: name})
		if err != nil {
			log.Fatal(err)
		}
		defer sb.Close(ctx)
	}
	all, _ := client.Sandboxes().List(ctx, alineo.ListOptions{Limit: 10})
	for _, d := range all {
		fmt.Println(d.Name, d.Status)
	}
	// Output:
	// second running
	// first running
}

func ExampleSandboxes_ListByName() {
	ctx := context.Background()
	client := newClient()
	for range 2 {
		sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "nightly"})
		if err != nil {
			log.Fatal(err)
		}
		_ = sb.Close(ctx)
	}
	runs, _ := client.Sandboxes().ListByName(ctx, "nightly", alineo.ListOptions{})
	fmt.Println(len(runs), runs[0].Status)
	// Output: 2 completed
}

func ExampleSandboxes_Get() {
	ctx := context.Background()
	client := newClient()
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "job"})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)
	d, _ := client.Sandboxes().Get(ctx, "job", sb.ID())
	fmt.Println(d.Name, d.Status, d.ExecCount)
	unknown, _ := client.Sandboxes().Get(ctx, "job", "no-such-id")
	fmt.Println(unknown == nil)
	// Output:
	// job running 0
	// true
}

func ExampleSandboxes_Delete() {
	ctx := context.Background()
	client := newClient()
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Name: "job"})
	if err != nil {
		log.Fatal(err)
	}
	_ = sb.Close(ctx)
	if err := client.Sandboxes().Delete(ctx, "job", sb.ID()); err != nil {
		log.Fatal(err)
	}
	es, _ := client.Sandboxes().Events(ctx, "job", sb.ID())
	fmt.Println(len(es))
	// Output: 0
}

func ExampleSandboxes_Events() {
	ctx := context.Background()
	client := newClient()
	sb := newSandbox(ctx, client)
	_, _ = sb.Exec(ctx, "echo out; sleep 0.3; echo err >&2").Wait()
	_ = sb.Close(ctx)
	es, _ := client.Sandboxes().Events(ctx, sb.Name(), sb.ID())
	for _, e := range es {
		switch e.Event {
		case events.ExecOutput:
			var p events.ExecOutputPayload
			_ = e.Decode(&p)
			fmt.Printf("%d %s %s %q\n", e.StepIndex, e.Event, p.Type, p.Bytes())
		default:
			fmt.Println(e.StepIndex, e.Event)
		}
	}
	// Output:
	// -1 sandbox.created
	// 1 exec.started
	// 1 exec.output stdout "out\n"
	// 1 exec.output stderr "err\n"
	// 1 exec.completed
	// -1 sandbox.closed
}

// Pipe with a second writer streams stderr too: a failing "make test"
// shows why it failed.
func ExampleExec_Pipe_stderr() {
	ctx := context.Background()
	sb := newSandbox(ctx, newClient())
	defer sb.Close(ctx)
	err := sb.Exec(ctx, "echo building; sleep 0.2; echo 'no rule to make target test' >&2; exit 2").Pipe(os.Stdout, os.Stdout)
	var ce *alineo.CommandError
	if errors.As(err, &ce) {
		fmt.Println("exit", ce.ExitCode)
	}
	// Output:
	// building
	// no rule to make target test
	// exit 2
}

// ErrNotFound matches every unknown session, sandbox, snapshot or
// environment.
func ExampleErrNotFound() {
	ctx := context.Background()
	client := newClient()
	_, err := client.Resume(ctx, "no-such-sandbox", alineo.ResumeOptions{})
	fmt.Println(errors.Is(err, alineo.ErrNotFound))
	_, err = client.Environments().Get(ctx, "no-such-environment")
	fmt.Println(errors.Is(err, alineo.ErrNotFound))
	// Output:
	// true
	// true
}

// A sandbox created with a Timeout ends on its own unless it is renewed: a
// worker renews the sandbox of its job while it runs, so that the sandbox
// of a worker that died expires.
func ExampleSandbox_Renew() {
	ctx := context.Background()
	client := newClient()
	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: "host", Timeout: 2 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	defer sb.Close(ctx)
	created := sb.ExpiresAt()
	renewed, err := sb.Renew(ctx, time.Now().Add(10*time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(renewed.Sub(created) > 7*time.Minute, sb.ExpiresAt().Equal(renewed))
	// Output: true true
}
