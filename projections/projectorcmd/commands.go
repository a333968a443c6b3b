package projectorcmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/internal/cli"
	"github.com/alineo-labs/alineo/projections"
)

func rebuild(ctx context.Context, b *bus.Bus, def projections.Definition, h projections.Handler, t projections.Target, o options, stdout io.Writer) error {
	ro := projections.RebuildOptions{Key: o.consumer, Filter: def.Filter, From: o.from, Partition: o.partitioning(),
		AllPartitions: !o.partitionSet, Progress: stdout}
	st, err := projections.RebuildHandler(ctx, b, h, ro)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rebuilt %s (%s): %d entries up to sequence %d in %s\n", t.Desc, def.Name, st.Applied, st.LastSeq, st.Elapsed.Round(time.Millisecond))
	return nil
}

func follow(ctx context.Context, b *bus.Bus, def projections.Definition, h projections.Handler, t projections.Target, o options, stdout io.Writer, log *slog.Logger) error {
	reg := cli.NewRegistry()
	r := &projections.Runtime{Bus: b, Handler: h, Name: def.Name, Consumer: o.consumer, Filter: def.Filter,
		Partition: o.partitioning(), Registerer: reg, Logger: log}
	if err := r.Init(); err != nil {
		return err
	}
	if o.metrics != "" {
		addr, _, err := cli.Serve(ctx, o.metrics, cli.MetricsHandler(reg, cli.NATSConnected(b)))
		if err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
		fmt.Fprintf(stdout, "metrics on http://%s/metrics\n", addr)
	}
	fmt.Fprintf(stdout, "projector %s (%s): %s -> %s\n", r.Key(), def.Name, b.ClientURL(), t.Desc)
	if o.nats == "" {
		fmt.Fprintf(stdout, "embedded NATS: NATS_URL is in %s (mode 0600: it holds the server's token)\n", filepath.Join(o.natsDir, "nats.url"))
	}
	errc := make(chan error, 1)
	go func() { errc <- r.Run(ctx) }()
	var tick <-chan time.Time
	if o.progress > 0 {
		t := time.NewTicker(o.progress)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case err := <-errc:
			pr := r.Progress()
			fmt.Fprintf(stdout, "projector stopped at offset %d (%d applied, %d parked)\n", pr.Offset, pr.Applied, pr.Parked)
			return err
		case <-tick:
			pr := r.Progress()
			fmt.Fprintf(stdout, "offset %d  applied %d  lag %d  parked %d  skipped %d  errors %d\n", pr.Offset, pr.Applied, pr.Lag, pr.Parked, pr.Skipped, pr.Errors)
		}
	}
}

// verify rebuilds the stream into an in-memory target and compares it with
// the target row for row. The target's offsets are read under --consumer
// (every partition's with --partitions).
func verify(ctx context.Context, b *bus.Bus, def projections.Definition, h projections.Handler, t projections.Target, o options, stdout io.Writer) error {
	if def.Verify == nil {
		return fmt.Errorf("%w: projection %s cannot be verified", projections.ErrInvalidConfig, def.Name)
	}
	fresh, closeFresh, err := memoryTarget(def)
	if err != nil {
		return err
	}
	defer closeFresh()
	fh, err := def.Open(ctx, fresh)
	if err != nil {
		return err
	}
	st, err := projections.RebuildHandler(ctx, b, fh, projections.RebuildOptions{Key: "alineo-verify", Filter: def.Filter})
	if err != nil {
		return err
	}
	offs, err := offsets(ctx, h, o)
	if err != nil {
		return err
	}
	if off := minOf(offs); off < st.LastSeq {
		fmt.Fprintf(stdout, "note: %s (%s) is at offset %d, the stream at %d; differences may be lag\n", t.Desc, o.consumer, off, st.LastSeq)
	}
	if err := def.Verify(ctx, t, fresh); err != nil {
		if errors.Is(err, projections.ErrMismatch) {
			return fmt.Errorf("%s differs from a rebuild of the stream: %w", t.Desc, err)
		}
		return err
	}
	fmt.Fprintf(stdout, "verified %s: equal to a rebuild of %d entries (up to sequence %d, projection %s)\n", t.Desc, st.Applied, st.LastSeq, def.Name)
	return nil
}

// partitions prints, for each partition of --consumer in --partitions, its
// offset in the target, its durable consumer's lag (while it exists: a
// projector ran it since the server started) and the projector that holds
// it now.
func partitions(ctx context.Context, b *bus.Bus, def projections.Definition, h projections.Handler, t projections.Target, o options, stdout io.Writer) error {
	si, err := b.Stream().Info(ctx)
	if err != nil {
		return fmt.Errorf("stream info: %w", err)
	}
	offs, err := offsets(ctx, h, o)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "projection %s, consumer %s, %d partition(s) in %s; stream %s at sequence %d (%d entries)\n",
		def.Name, o.consumer, o.partitions, t.Desc, b.Config().Stream, si.State.LastSeq, si.State.Msgs)
	tw := tabwriter.NewWriter(stdout, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tKEY\tOFFSET\tLAG\tHELD BY")
	for i, off := range offs {
		key := projections.PartitionKey(o.consumer, i, o.partitions)
		lag := "-"
		c, err := b.JetStream().Consumer(ctx, b.Config().Stream, key)
		switch {
		case err == nil:
			ci, err := c.Info(ctx)
			if err != nil {
				return fmt.Errorf("consumer %s: %w", key, err)
			}
			lag = fmt.Sprint(ci.NumPending + uint64(ci.NumAckPending))
		case !errors.Is(err, jetstream.ErrConsumerNotFound):
			return fmt.Errorf("consumer %s: %w", key, err)
		}
		holder, err := projections.PartitionOwner(ctx, b, key)
		if err != nil {
			return fmt.Errorf("owner of %s: %w", key, err)
		}
		if holder == "" {
			holder = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d\t%s\t%s\n", i, key, off, lag, holder)
	}
	return tw.Flush()
}

// offsets returns the offset of each of the consumer's partitions.
func offsets(ctx context.Context, h projections.Handler, o options) ([]uint64, error) {
	var offs []uint64
	for i := range o.partitions {
		k := projections.PartitionKey(o.consumer, i, o.partitions)
		off, err := h.Offset(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("offset %s: %w", k, err)
		}
		offs = append(offs, off)
	}
	return offs, nil
}

func minOf(offs []uint64) uint64 {
	var low uint64
	for i, off := range offs {
		if i == 0 || off < low {
			low = off
		}
	}
	return low
}
