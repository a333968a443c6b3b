package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/alineo-labs/alineo/adapters/postgres"
	"github.com/alineo-labs/alineo/adapters/sqlite"
	"github.com/alineo-labs/alineo/audit"
	"github.com/alineo-labs/alineo/internal/usage"
)

const ledgerUsage = `alineo ledger [flags] verify | anchor

verify checks every session's hash chain (or one: --sandbox, or a time
range: --since/--until) in the ledger at --sqlite PATH, --postgres URL or
--nats URL (the bus's stream),
and exits 0 when every chain holds, 1 naming each broken session and its
first entry that breaks. Sessions written by the TypeScript SDK are
unchained, not broken. --anchors FILE also checks the heads anchored earlier.
anchor prints every chained session's head, one JSON object a line (append
it to a file kept away from the database: that is the anchor).`

// errLedgerFlags is returned for ledger flags that do not name one ledger.
var errLedgerFlags = errors.New("want exactly one of --sqlite PATH, --postgres URL and --nats URL")

func ledgerCmd(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
	sqlitePath := fs.String("sqlite", "", "SQLite ledger file")
	pgURL := fs.String("postgres", "", "Postgres ledger URL")
	natsURL := fs.String("nats", "", "NATS server of the bus ledger (stream ALINEO_LEDGER)")
	sandbox := fs.String("sandbox", "", "only this sandbox id")
	since := fs.String("since", "", "only entries at or after this time (RFC 3339)")
	until := fs.String("until", "", "only entries at or before this time (RFC 3339)")
	anchors := fs.String("anchors", "", "verify: anchors file to check the heads against")
	return func(ctx context.Context, c *cli, args []string) error {
		f := audit.Filter{SandboxID: *sandbox}
		for _, b := range []struct {
			s   string
			dst *int64
		}{{*since, &f.Since}, {*until, &f.Until}} {
			if b.s == "" {
				continue
			}
			t, err := time.Parse(time.RFC3339, b.s)
			if err != nil {
				return fmt.Errorf("--since/--until: %w", err)
			}
			*b.dst = t.UnixMilli()
		}
		src, closeSrc, err := openLedger(*sqlitePath, *pgURL, *natsURL)
		if errors.Is(err, errLedgerFlags) {
			return usage.Errorf(usage.Text(fs, "usage: "+ledgerUsage), "alineo ledger: %w", err)
		}
		if err != nil {
			return err
		}
		defer closeSrc()
		switch args[0] {
		case "verify":
			return verifyLedger(ctx, c.out.w, src, f, *anchors)
		case "anchor":
			as, err := audit.Anchors(ctx, src, f, time.Now().UnixMilli())
			if err != nil {
				return err
			}
			return audit.WriteAnchors(c.out.w, as)
		}
		return fmt.Errorf("alineo ledger: unknown subcommand %q (verify or anchor)", args[0])
	}
}

func openLedger(path, url, natsURL string) (audit.Scanner, func(), error) {
	n := 0
	for _, s := range []string{path, url, natsURL} {
		if s != "" {
			n++
		}
	}
	if n != 1 {
		return nil, nil, errLedgerFlags
	}
	switch {
	case natsURL != "":
		return audit.Connect(natsURL)
	case path != "":
		if _, err := os.Stat(path); err != nil {
			return nil, nil, fmt.Errorf("--sqlite: %w", err)
		}
		s, err := sqlite.Open(path, sqlite.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	default:
		s, err := postgres.Open(url, postgres.Config{})
		if err != nil {
			return nil, nil, err
		}
		return s, func() { s.Close() }, nil
	}
}

func verifyLedger(ctx context.Context, w io.Writer, src audit.Scanner, f audit.Filter, anchorsFile string) error {
	opts := audit.Options{Progress: func(n int) { fmt.Fprintf(os.Stderr, "alineo ledger verify: %d entries\n", n) }}
	if anchorsFile != "" {
		fh, err := os.Open(anchorsFile)
		if err != nil {
			return fmt.Errorf("--anchors: %w", err)
		}
		opts.Anchors, err = audit.ReadAnchors(fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("--anchors: %w", err)
		}
	}
	res, err := audit.Verify(ctx, src, f, opts)
	for _, s := range res.Sessions {
		fmt.Fprintln(w, s)
	}
	if err == nil {
		fmt.Fprintf(w, "%d entries, %d sessions: no chain is broken\n", res.Entries, len(res.Sessions))
	}
	return err
}
