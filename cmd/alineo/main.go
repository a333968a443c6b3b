// Command alineo is the auditor's CLI against the alineo API (cmd/api): it
// lists sessions, shows one, prints and follows their events live, tails the
// whole ledger stream and lists and submits jobs.
//
//	alineo sandboxes [--name N] [--status running|completed] [--run-id R] [--sandbox-id ID] [--limit N]
//	alineo show NAME ID
//	alineo events NAME ID [-f [--keep]] [--event NAME]
//	alineo tail [--event E]... [--sandbox ID] [--from SEQ]
//	alineo jobs [--limit N]
//	alineo job submit FILE
//	alineo job status JOB_ID
//	alineo ledger verify|anchor (--sqlite PATH | --postgres URL | --nats URL) [--sandbox ID] [--since T] [--until T] [--anchors FILE]
//
// Every command takes --url (ALINEO_API_URL, default http://127.0.0.1:8090),
// --token (ALINEO_API_TOKEN) and -o table|json|jsonl. Tables are aligned;
// colour is used only on a terminal (and never with NO_COLOR set). It
// imports package api's client; ledger verify and anchor read the ledger
// itself, through package audit and the SQLite and Postgres stores (nats.go's
// client for --nats; never the NATS server).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/alineo-labs/alineo/api/apiclient"
	"github.com/alineo-labs/alineo/internal/usage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	usage.Exit("alineo", run(ctx, os.Args[1:], os.Getenv, os.Stdout))
}

const help = `usage: alineo COMMAND [flags] [ARGS]

The auditor's CLI against the alineo API.

commands:
  sandboxes             list sessions, newest first (filters: --name, --status, --run-id, --sandbox-id)
  show NAME ID          show one session's details
  events NAME ID [-f]   print a session's events; -f follows them live until the
                        session closes (--keep: until Ctrl-C)
  tail [--event E]      follow the whole event stream live (--event, --sandbox filter it)
  jobs                  list jobs, the most recently submitted first
  job submit FILE       submit a job spec (JSON) and print its id
  job status JOB_ID     print a job's status
  ledger verify         check the ledger's hash chains (--sqlite PATH | --postgres URL | --nats URL)
  ledger anchor         print every session's chain head, to keep elsewhere
  help                  print this help

Every command takes --url (env ALINEO_API_URL, default http://127.0.0.1:8090),
--token (env ALINEO_API_TOKEN) and -o table|json|jsonl, before or after the
command and its arguments. "alineo COMMAND -h" lists the command's flags;
"alineo --version" prints the version.`

// DefaultURL is the API's address when neither --url nor ALINEO_API_URL is set.
const DefaultURL = "http://127.0.0.1:8090"

// command is one subcommand: its usage line, its arguments and what it does.
type command struct {
	usage string
	args  int // exact number of arguments; -1 for "see check"
	flags func(fs *flag.FlagSet) func(ctx context.Context, c *cli, args []string) error
}

var commands = map[string]command{
	"sandboxes": {"alineo sandboxes [flags]\n\nLists sessions, newest first.", 0, sandboxesCmd},
	"show":      {"alineo show [flags] NAME ID\n\nShows one session's details.", 2, showCmd},
	"events":    {"alineo events [flags] NAME ID\n\nPrints a session's events; -f follows them live (resuming after a drop) until the session's\nsandbox.closed, or with --keep until Ctrl-C. --event keeps only the events named (known\nevents in either vocabulary, or extension events such as step_complete).", 2, eventsCmd},
	"tail":      {"alineo tail [flags]\n\nFollows the whole event stream live; resumes after a drop.", 0, tailCmd},
	"jobs":      {"alineo jobs [flags]\n\nLists jobs, the most recently submitted first.", 0, jobsCmd},
	"job":       {jobUsage, 2, jobCmd},
	"ledger":    {ledgerUsage, 1, ledgerCmd},
}

const jobUsage = "alineo job [flags] submit FILE | status JOB_ID\n\nSubmits a job spec (JSON) or prints a job's status."

// cli is what every command gets: the API client and the output.
type cli struct {
	client *apiclient.Client
	out    *printer
}

func run(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	// The command is the first argument that is not a flag: the flags
	// every command takes may come before it ("alineo --url U sandboxes").
	global := flag.NewFlagSet("alineo", flag.ContinueOnError)
	globalFlags(global, getenv)
	name, args := usage.Command(args, global)
	switch {
	case name == "" && slices.ContainsFunc(args, usage.IsVersion), usage.IsVersion(name):
		return usage.PrintVersion(stdout, "alineo")
	case name == "" && slices.ContainsFunc(args, usage.IsHelp), usage.IsHelp(name):
		return usage.Help(stdout, help)
	case name == "":
		return usage.Errorf(help, "no command")
	}
	cmd, ok := commands[name]
	if !ok {
		return usage.Errorf(help, "unknown command %q", name)
	}
	fs := flag.NewFlagSet("alineo "+name, flag.ContinueOnError)
	url, token, format := globalFlags(fs, getenv)
	do := cmd.flags(fs)
	head := "usage: " + cmd.usage
	if err := usage.Parse(fs, args, head, stdout); err != nil {
		return err
	}
	pos := fs.Args()
	if len(pos) != cmd.args {
		return usage.Errorf(usage.Text(fs, head), "alineo %s: want %d argument(s), got %d", name, cmd.args, len(pos))
	}
	switch *format {
	case "table", "json", "jsonl":
	default:
		return usage.Errorf(usage.Text(fs, head), "-o: want table, json or jsonl, got %q", *format)
	}
	client, err := apiclient.New(*url, *token, nil)
	if err != nil {
		return usage.Errorf(usage.Text(fs, head), "--url: %w", err)
	}
	c := &cli{client: client, out: newPrinter(stdout, *format, colour(stdout, getenv))}
	err = do(ctx, c, pos)
	if ferr := c.out.flush(); err == nil {
		err = ferr
	}
	var ae *apiclient.Error
	if errors.As(err, &ae) && ae.Status == 401 {
		return fmt.Errorf("%w (set --token or ALINEO_API_TOKEN)", err)
	}
	return err
}

// globalFlags registers on fs the flags every command takes.
func globalFlags(fs *flag.FlagSet, getenv func(string) string) (url, token, format *string) {
	url = fs.String("url", env(getenv, "ALINEO_API_URL", DefaultURL), "API base URL (env ALINEO_API_URL)")
	token = fs.String("token", getenv("ALINEO_API_TOKEN"), "API bearer token (env ALINEO_API_TOKEN)")
	format = fs.String("o", "table", "output format: table, json or jsonl")
	fs.StringVar(format, "output", "table", "output format: table, json or jsonl (same as -o)")
	return url, token, format
}

func env(getenv func(string) string, key, def string) string {
	if v := getenv(key); v != "" {
		return v
	}
	return def
}

// colour reports whether w is a terminal and NO_COLOR is unset (and TERM is
// not "dumb").
func colour(w io.Writer, getenv func(string) string) bool {
	if getenv("NO_COLOR") != "" || getenv("TERM") == "dumb" {
		return false
	}
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// listFlag collects a repeatable, comma-separated flag.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(v string) error {
	for s := range strings.SplitSeq(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			*f = append(*f, s)
		}
	}
	return nil
}
