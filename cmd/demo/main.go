// Command demo is the first `make demo`: it starts sandboxd in-process (or uses
// the server at $OPEN_SANDBOX_URL), creates a sandbox, streams a command's
// output, writes and reads a file, closes the sandbox, and prints the session's
// ledger read back from the SQLite file (./alineo.db by default).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/alineo-labs/alineo"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/internal/usage"
	"github.com/alineo-labs/alineo/sandboxd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	usage.Exit("demo", run(ctx, os.Args[1:], os.Getenv, os.Stdout))
}

const help = `usage: demo [flags]

The SDK tour: a sandbox (sandboxd in-process unless OPEN_SANDBOX_URL is set),
a streamed command, a file written and read back, and the session's ledger
read back from the SQLite file.`

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	dbPath := fs.String("db", "./alineo.db", "SQLite ledger file")
	image := fs.String("image", "host", "sandbox image")
	noIsolation := fs.Bool("sandboxd-no-isolation", getenv("ALINEO_SANDBOXD_NO_ISOLATION") == "1",
		"DEVELOPMENT ONLY: run the embedded sandboxd's sandboxes as plain host processes, without isolation")
	if err := usage.Parse(fs, args, help, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usage.Errorf(usage.Text(fs, help), "unexpected argument %q", fs.Arg(0))
	}

	url := getenv("OPEN_SANDBOX_URL")
	if url == "" {
		// No server: run sandboxd in this process and use its URL.
		srv, err := sandboxd.Open(ctx, sandboxd.Config{NoIsolation: *noIsolation})
		if err != nil {
			return err
		}
		defer srv.Close(context.WithoutCancel(ctx))
		if url, err = srv.Start(ctx); err != nil {
			if errors.Is(err, sandboxd.ErrIsolationUnavailable) {
				return fmt.Errorf("%w\n(for development only: -sandboxd-no-isolation runs sandboxes without isolation)", err)
			}
			return err
		}
		fmt.Fprintln(stdout, "embedded sandboxd at", url)
	}

	store, err := sqlite.Open(*dbPath, sqlite.Config{})
	if err != nil {
		return err
	}
	defer store.Close()
	client, err := alineo.New(alineo.Options{BaseURL: url, APIKey: getenv("OPEN_SANDBOX_API_KEY"), Adapter: store})
	if err != nil {
		return err
	}

	sb, err := client.Sandbox(ctx, alineo.SandboxOptions{Image: *image, Name: "demo"})
	if err != nil {
		return err
	}
	defer sb.Close(ctx)
	fmt.Fprintf(stdout, "sandbox %s (%s)\n", sb.ID(), sb.Name())

	fmt.Fprintln(stdout, "$ for i in 1 2 3; do echo step $i; sleep 0.2; done")
	if err := sb.Exec(ctx, "for i in 1 2 3; do echo step $i; sleep 0.2; done").Pipe(stdout); err != nil {
		return err
	}
	if err := sb.WriteFile(ctx, "/tmp/hello.txt", []byte("hello from the demo\n")); err != nil {
		return err
	}
	b, err := sb.ReadFile(ctx, "/tmp/hello.txt")
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "read /tmp/hello.txt: %s", b)
	if err := sb.Close(ctx); err != nil {
		return err
	}

	// Read the session back from the file, through a store of its own.
	ledger, err := sqlite.Open(*dbPath, sqlite.Config{})
	if err != nil {
		return err
	}
	defer ledger.Close()
	es, err := ledger.ReadAll(ctx, sb.Name(), sb.ID())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nledger %s, session (%s, %s): %d events\n", ledger.Path(), sb.Name(), sb.ID(), len(es))
	for _, e := range es {
		fmt.Fprintf(stdout, "%s  step %2d  %-16s %s\n", time.UnixMilli(e.Ts).UTC().Format("15:04:05.000"), e.StepIndex, e.Event,
			strings.TrimSpace(string(e.Payload)))
	}
	return nil
}
