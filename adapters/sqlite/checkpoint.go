package sqlite

import (
	"context"
	"database/sql"
	"log/slog"
	"time"
)

// The WAL's checkpoints. The writer's automatic checkpoint stays the WAL's
// bound (only a checkpoint between two of the writer's transactions can
// restart a WAL written all the time), at autoCheckpointFrames instead of
// SQLite's 1000; the background checkpointer aims at copying about
// checkpointFrames a round, waiting checkpointMinWait to checkpointMaxWait
// after a commit asks for one.
const (
	autoCheckpointFrames = 4000 // 16 MB of 4 KB pages
	checkpointFrames     = 256
	checkpointMinWait    = 10 * time.Millisecond
	checkpointMaxWait    = time.Second
)

// checkpointer copies a file-backed Store's WAL into its database in the
// background, with PASSIVE checkpoints on a connection of its own. SQLite's
// automatic checkpoint runs in the path of a commit, on the writer's
// connection: the commit that takes the WAL past its threshold copies every
// frame and syncs the WAL and the database before its caller returns (tens
// of milliseconds, in a projector's lag under a steady load; 35 applies of
// 20 ms or more in BenchmarkProjectorLag's 3 s, 1 to 3 with the
// checkpointer). A passive checkpoint runs beside the writer without
// blocking it; after one that copied every frame the writer's next
// transaction restarts the WAL, and the automatic checkpoint finds little
// left to copy and sync when it comes.
type checkpointer struct {
	db   *sql.DB // one connection
	log  *slog.Logger
	ask  chan struct{} // a commit happened: capacity 1, so asks coalesce
	stop chan struct{}
	done chan struct{}
}

func newCheckpointer(db *sql.DB, log *slog.Logger) *checkpointer {
	c := &checkpointer{db: db, log: log, ask: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go c.run()
	return c
}

// commit tells c that a transaction committed; it never blocks.
func (c *checkpointer) commit() {
	select {
	case c.ask <- struct{}{}:
	default:
	}
}

// run checkpoints once a commit asked and the wait passed, the wait adapting
// to the frames the WAL grew by since the last round.
func (c *checkpointer) run() {
	defer close(c.done)
	wait := 100 * time.Millisecond
	var frames int64 // the WAL's frames at the last round
	t := time.NewTimer(wait)
	t.Stop()
	for {
		select {
		case <-c.ask:
		case <-c.stop:
			return
		}
		t.Reset(wait)
		select {
		case <-t.C:
		case <-c.stop:
			t.Stop()
			return
		}
		var busy, wal, copied int64 // copied: the frames in the database now
		if err := c.db.QueryRowContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)").Scan(&busy, &wal, &copied); err != nil {
			c.log.Debug("sqlite: background checkpoint failed", "err", err)
			continue
		}
		if busy != 0 || wal < 0 { // another connection is checkpointing
			continue
		}
		grew := wal - frames
		if wal < frames { // the WAL restarted since
			grew = wal
		}
		frames = wal
		switch {
		case grew < checkpointFrames/2:
			wait = min(2*wait, checkpointMaxWait)
		case grew > checkpointFrames:
			wait = max(wait/2, checkpointMinWait)
		}
	}
}

// close stops c, once a checkpoint it is running ended, and closes its
// connection.
func (c *checkpointer) close() error {
	close(c.stop)
	<-c.done
	return c.db.Close()
}
