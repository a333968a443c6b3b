package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/api/apiclient"
	"github.com/alineo-labs/alineo/api/wire"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/internal/usage"
)

func sandboxesCmd(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
	var q apiclient.SandboxQuery
	var status string
	fs.StringVar(&q.Name, "name", "", "only sessions of this name")
	fs.StringVar(&status, "status", "", "only running or completed sessions")
	fs.StringVar(&q.RunID, "run-id", "", "only sessions of this run id")
	fs.StringVar(&q.SandboxID, "sandbox-id", "", "only sessions of this sandbox id")
	fs.IntVar(&q.Limit, "limit", 0, "at most this many sessions (default the server's page, 100)")
	return func(ctx context.Context, c *cli, _ []string) error {
		q.Status = adapters.SandboxStatus(status)
		list, err := c.client.Sandboxes(ctx, q)
		if err != nil {
			return err
		}
		return c.out.sandboxes(list.Sandboxes)
	}
}

func showCmd(*flag.FlagSet) func(context.Context, *cli, []string) error {
	return func(ctx context.Context, c *cli, args []string) error {
		d, err := c.client.Sandbox(ctx, args[0], args[1])
		if err != nil {
			return err
		}
		return c.out.details(d)
	}
}

// errSessionClosed ends events -f at the session's sandbox.closed.
var errSessionClosed = errors.New("session closed")

func eventsCmd(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
	follow := fs.Bool("f", false, "follow: print new events as they happen (resumes with Last-Event-ID after a drop) until the session's sandbox.closed or Ctrl-C")
	keep := fs.Bool("keep", false, "with -f: keep following after the session's sandbox.closed, until Ctrl-C")
	var evs listFlag
	fs.Var(&evs, "event", "only this event (repeatable or comma-separated), e.g. exec.started or an extension event such as step_complete")
	return func(ctx context.Context, c *cli, args []string) error {
		name, id := args[0], args[1]
		only, err := eventFilter(evs)
		if err != nil {
			return err
		}
		show := func(e events.Entry) error {
			if len(only) > 0 && !slices.ContainsFunc(only, e.Event.Is) {
				return nil
			}
			return c.out.event(e, false)
		}
		c.out.stream = *follow
		var last uint64
		closed := false
		c.out.eventsHeader(false)
		for { // every page
			page, err := c.client.Events(ctx, name, id, last, 0)
			if err != nil {
				return err
			}
			for _, e := range page.Events {
				if err := show(e); err != nil {
					return err
				}
				last = e.Seq
				closed = closed || e.Event.Canonical() == events.SandboxClosed
			}
			if page.NextAfter == 0 {
				break
			}
			last = page.NextAfter
		}
		if !*follow || closed && !*keep {
			return nil
		}
		if err := c.out.flush(); err != nil {
			return err
		}
		q := apiclient.StreamQuery{SandboxID: id, After: last}
		if last == 0 {
			q.From = 1 // nothing projected yet: the session's whole history
		}
		err = c.client.Stream(ctx, q, func(e events.Entry) error {
			if e.Name != name {
				return nil // another session of the same sandbox id
			}
			if err := show(e); err != nil {
				return err
			}
			if err := c.out.flush(); err != nil {
				return err
			}
			if e.Event.Canonical() == events.SandboxClosed && !*keep {
				return errSessionClosed
			}
			return nil
		})
		if errors.Is(err, errSessionClosed) {
			return nil
		}
		return err
	}
}

// eventFilter reads --event: known events (either vocabulary) or extension
// events.
func eventFilter(names []string) ([]events.Event, error) {
	var out []events.Event
	for _, n := range names {
		ev := events.Event(n)
		if err := events.CheckEvent(ev); err != nil { // a known event or an extension event
			return nil, fmt.Errorf("--event: %w", err)
		}
		out = append(out, ev)
	}
	return out, nil
}

func tailCmd(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
	var evs listFlag
	fs.Var(&evs, "event", "only this event (repeatable or comma-separated), e.g. exec.started or an extension event such as step_complete")
	sandbox := fs.String("sandbox", "", "only this sandbox id")
	from := fs.Uint64("from", 0, "start at this ledger sequence (1: the whole history) instead of the next new event")
	return func(ctx context.Context, c *cli, _ []string) error {
		c.out.stream = true
		q := apiclient.StreamQuery{SandboxID: *sandbox, From: *from}
		var err error
		if q.Events, err = eventFilter(evs); err != nil {
			return err
		}
		c.out.eventsHeader(true)
		if err := c.out.flush(); err != nil {
			return err
		}
		return c.client.Stream(ctx, q, func(e events.Entry) error {
			if err := c.out.event(e, true); err != nil {
				return err
			}
			return c.out.flush()
		})
	}
}

func jobsCmd(fs *flag.FlagSet) func(context.Context, *cli, []string) error {
	limit := fs.Int("limit", 0, "at most this many jobs (default 100)")
	return func(ctx context.Context, c *cli, _ []string) error {
		sts, err := c.client.Jobs(ctx, *limit)
		if err != nil {
			return err
		}
		return c.out.jobs(sts)
	}
}

func jobCmd(*flag.FlagSet) func(context.Context, *cli, []string) error {
	return func(ctx context.Context, c *cli, args []string) error {
		switch args[0] {
		case "submit":
			spec, err := os.ReadFile(args[1])
			if err != nil {
				return err
			}
			st, err := c.client.SubmitJob(ctx, spec)
			var ae *apiclient.Error
			if errors.As(err, &ae) && ae.Code == wire.CodeInvalidSpec {
				// The message names the field (or the line and column) already.
				return fmt.Errorf("%s: %s", args[1], ae.Message)
			}
			if err != nil {
				return err
			}
			return c.out.submitted(st)
		case "status":
			st, err := c.client.Job(ctx, args[1])
			if err != nil {
				return err
			}
			return c.out.jobs1(st)
		}
		return usage.Errorf("usage: "+jobUsage, "alineo job: want submit FILE or status JOB_ID, got %q", args[0])
	}
}
