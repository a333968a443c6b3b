package execstats_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/alineo-labs/alineo/bus"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/examples/execstats"
	"github.com/alineo-labs/alineo/examples/internal/fixture"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
)

func openDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "stats.db")+"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func stats(t testing.TB, db *sql.DB) []execstats.Row {
	t.Helper()
	rows, err := execstats.Stats(context.Background(), db)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	return rows
}

func runtime(b *projections.Runtime, h projections.Handler, consumer string) *projections.Runtime {
	b.Handler, b.Consumer, b.Name, b.Filter = h, consumer, execstats.Name, execstats.Filter
	return b
}

// A hand-made history has figures one can check by hand.
func TestKnownFigures(t *testing.T) {
	b := projectiontest.Bus(t)
	day1 := time.Date(2026, 11, 2, 10, 0, 0, 0, time.UTC).UnixMilli()
	day2 := day1 + 24*time.Hour.Milliseconds()
	var es []events.Entry
	exec := func(ts int64, name, id string, step int, dur int64, code int) {
		es = append(es,
			events.New(ts, name, id, step, events.ExecStarted, events.ExecStartedPayload{Seq: step, Cmd: "x"}),
			events.New(ts+1, name, id, step, events.ExecOutput, events.NewOutput(step, events.Stdout, []byte("out"))),
			events.New(ts+dur, name, id, step, events.ExecCompleted, events.ExecCompletedPayload{Seq: step, ExitCode: code}))
	}
	es = append(es, events.New(day1, "build", "sb-a", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-a", Image: "img-a"}))
	exec(day1, "build", "sb-a", 1, 100, 0)
	exec(day1+1000, "build", "sb-a", 2, 400, 0)
	exec(day1+2000, "build", "sb-a", 3, 300, 1)
	exec(day1+3000, "build", "sb-a", 4, 200, 0)
	exec(day2, "build", "sb-a", 5, 50, 2)
	exec(day1, "test", "sb-b", 1, 1000, 0) // sb-b recorded no sandbox.created: no image
	es = append(es, events.New(day1, "build", "sb-c", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-c", Image: "img-c"}))
	exec(day1+5000, "build", "sb-c", 1, 70, 0)
	projectiontest.Publish(t, b, es)
	last := projectiontest.LastSeq(t, b, execstats.Filter)

	db := openDB(t)
	r := runtime(&projections.Runtime{Bus: b}, execstats.New(db, projections.SQLite), "execstats")
	projectiontest.Start(t, r)
	projectiontest.Await(t, r, last, 10*time.Second)
	want := []execstats.Row{
		{Image: "", Name: "test", Day: "2026-11-02", Count: 1, P50: 1000, P95: 1000, ExitCodes: map[int]int{0: 1}},
		{Image: "img-a", Name: "build", Day: "2026-11-02", Count: 4, P50: 200, P95: 400, ExitCodes: map[int]int{0: 3, 1: 1}},
		{Image: "img-a", Name: "build", Day: "2026-11-03", Count: 1, P50: 50, P95: 50, ExitCodes: map[int]int{2: 1}},
		{Image: "img-c", Name: "build", Day: "2026-11-02", Count: 1, P50: 70, P95: 70, ExitCodes: map[int]int{0: 1}},
	}
	if got := stats(t, db); !reflect.DeepEqual(got, want) {
		t.Fatalf("stats = %+v\nwant %+v", got, want)
	}
	// The filter was pushed down: only the 2 sandbox.created and the 14
	// exec.started/completed were delivered.
	if p := r.Progress(); p.Applied != 16 || p.Skipped != 0 {
		t.Fatalf("progress = %+v, want 16 applied, none skipped", p)
	}
}

// expected computes the statistics of es in memory: the oracle the SQL
// projection is compared with.
func expected(es []events.Entry) []execstats.Row {
	type key struct {
		id, name string
		step     int
	}
	started := map[key]int64{}
	image := map[string]string{}
	type group struct {
		durs  []int64
		codes map[int]int
	}
	groups := map[[3]string]*group{}
	for _, e := range es {
		k := key{e.SandboxID, e.Name, e.StepIndex}
		switch e.Event {
		case events.SandboxCreated:
			var p events.SandboxCreatedPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				panic(err)
			}
			if image[e.SandboxID] == "" {
				image[e.SandboxID] = p.Image
			}
		case events.ExecStarted:
			started[k] = e.Ts
		case events.ExecCompleted:
			var p events.ExecCompletedPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				panic(err)
			}
			gk := [3]string{image[e.SandboxID], e.Name, time.UnixMilli(e.Ts).UTC().Format(time.DateOnly)}
			g := groups[gk]
			if g == nil {
				g = &group{codes: map[int]int{}}
				groups[gk] = g
			}
			g.durs = append(g.durs, e.Ts-started[k])
			g.codes[p.ExitCode]++
		}
	}
	var out []execstats.Row
	for gk, g := range groups {
		slices.Sort(g.durs)
		out = append(out, execstats.Row{Image: gk[0], Name: gk[1], Day: gk[2], Count: len(g.durs),
			P50: execstats.Percentile(g.durs, 50), P95: execstats.Percentile(g.durs, 95), ExitCodes: g.codes})
	}
	slices.SortFunc(out, func(a, b execstats.Row) int {
		return cmp.Or(cmp.Compare(a.Image, b.Image), cmp.Compare(a.Name, b.Name), cmp.Compare(a.Day, b.Day))
	})
	return out
}

// The history the SDK recorded on sandboxd (200 sandboxes, ~10k events)
// gives the figures the fixture's plan ran: per image and session name, the
// number of execs and of each exit code; per image, name and day, durations
// equal to those computed in memory from the recorded entries.
func TestRecordedHistory(t *testing.T) {
	h := fixture.Get(t)
	last := projectiontest.LastSeq(t, h.Bus, execstats.Filter)
	db := openDB(t)
	r := runtime(&projections.Runtime{Bus: h.Bus, BatchSize: 500}, execstats.New(db, projections.SQLite), "execstats-recorded")
	projectiontest.Start(t, r)
	projectiontest.Await(t, r, last, 2*time.Minute)
	got := stats(t, db)

	// What the fixture ran, per image (the SDK recorded it in
	// sandbox.created) and session name.
	wantCount, wantCodes := map[string]int{}, map[string]map[int]int{}
	total := 0
	for _, s := range h.Sandboxes {
		k := s.Image + "/" + s.Name
		if wantCodes[k] == nil {
			wantCodes[k] = map[int]int{}
		}
		for _, e := range s.Execs {
			wantCount[k]++
			wantCodes[k][e.ExitCode]++
			total++
		}
	}
	gotCount, gotCodes := map[string]int{}, map[string]map[int]int{}
	for _, row := range got {
		k := row.Image + "/" + row.Name
		gotCount[k] += row.Count
		if gotCodes[k] == nil {
			gotCodes[k] = map[int]int{}
		}
		for c, n := range row.ExitCodes {
			gotCodes[k][c] += n
		}
	}
	if !reflect.DeepEqual(gotCount, wantCount) || !reflect.DeepEqual(gotCodes, wantCodes) {
		t.Fatalf("per image and name: counts %v, exit codes %v\nwant counts %v, exit codes %v", gotCount, gotCodes, wantCount, wantCodes)
	}
	images := map[string]int{}
	for _, row := range got {
		images[row.Image] += row.Count
	}
	if len(images) != 2 || images[fixture.Image] == 0 || images[fixture.TinyImage] == 0 {
		t.Fatalf("execs per image %v, want the fixture's two images, %s and %s", images, fixture.Image, fixture.TinyImage)
	}
	for _, name := range fixture.Names {
		for _, code := range fixture.ExitCodes {
			if wantCodes[fixture.Image+"/"+name][code] == 0 {
				t.Fatalf("the plan runs no exit %d under %s: the histogram checks less than it should", code, name)
			}
		}
	}
	// Days and durations: computed in memory from the recorded Ts.
	if want := expected(h.Entries); !reflect.DeepEqual(got, want) {
		t.Fatalf("stats differ from the figures computed from the recorded entries:\n got %+v\nwant %+v", got, want)
	}
	days := map[string]bool{}
	for _, e := range h.Entries {
		if e.Event == events.ExecCompleted {
			days[time.UnixMilli(e.Ts).UTC().Format(time.DateOnly)] = true
		}
	}
	if len(got) != len(images)*len(fixture.Names)*len(days) {
		t.Fatalf("%d rows, want %d images × %d names × %d days", len(got), len(images), len(fixture.Names), len(days))
	}
	// The filter was pushed down: only sandbox.created, exec.started and
	// exec.completed were delivered.
	want := uint64(2*total + len(h.Sandboxes))
	if p := r.Progress(); p.Applied != want || p.Skipped != 0 {
		t.Fatalf("progress = %+v, want %d applied, none skipped", p, want)
	}
}

// blockingTx wraps the projection's ApplyTx: on batch number n it writes
// the batch's rows, then blocks until the runtime is killed (its ctx
// cancelled), so the transaction dies mid-batch.
func blockingTx(h *projections.SQLHandler, n int64, blocked chan<- struct{}) {
	inner := h.ApplyTx
	var calls atomic.Int64
	h.ApplyTx = func(ctx context.Context, tx *sql.Tx, es []events.Entry) error {
		if err := inner(ctx, tx, es); err != nil {
			return err
		}
		if calls.Add(1) == n {
			close(blocked)
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
}

// Killed mid-batch and restarted, the projection equals a clean rebuild row
// for row, on the SDK's recorded history and on a generated one.
func TestKilledMidBatchEqualsRebuild(t *testing.T) {
	t.Run("recorded", func(t *testing.T) {
		h := fixture.Get(t)
		killedMidBatch(t, h.Bus, h.Entries, "execstats-kill")
	})
	t.Run("generated", func(t *testing.T) {
		b := projectiontest.Bus(t)
		es := projectiontest.History(2, 50, 10)
		projectiontest.Publish(t, b, es)
		killedMidBatch(t, b, es, "execstats")
	})
}

func killedMidBatch(t *testing.T, b *bus.Bus, es []events.Entry, consumer string) {
	last := projectiontest.LastSeq(t, b, execstats.Filter)
	db := openDB(t)

	h := execstats.New(db, projections.SQLite)
	blocked := make(chan struct{})
	blockingTx(h, 3, blocked)
	r1 := runtime(&projections.Runtime{Bus: b, BatchSize: 100}, h, consumer)
	stop := projectiontest.Start(t, r1)
	<-blocked
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if off := r1.Progress().Offset; off == 0 || off >= last {
		t.Fatalf("killed at offset %d, want mid-stream (last %d)", off, last)
	}

	r2 := runtime(&projections.Runtime{Bus: b, BatchSize: 100}, execstats.New(db, projections.SQLite), consumer)
	projectiontest.Start(t, r2)
	projectiontest.Await(t, r2, last, 2*time.Minute)

	fresh := openDB(t)
	st, err := projections.RebuildHandler(context.Background(), b, execstats.New(fresh, projections.SQLite),
		projections.RebuildOptions{Key: consumer + "-rebuild", Filter: execstats.Filter})
	if err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	if st.Applied == 0 {
		t.Fatalf("rebuild applied nothing: %+v", st)
	}
	if err := execstats.Verify(context.Background(), db, projections.SQLite, fresh, projections.SQLite); err != nil {
		t.Fatalf("restarted projection differs from a rebuild: %v", err)
	}
	if got, want := stats(t, db), expected(es); !reflect.DeepEqual(got, want) {
		t.Fatalf("stats differ from the in-memory figures")
	}
}

// A rebuild beside the live projection, while sandboxes keep writing, ends
// equal to it once it has caught up. The recorded history is written again,
// to a bus of its own, half before and half during the rebuild.
func TestRebuildBesideLiveUnderLoad(t *testing.T) {
	es := fixture.Get(t).Entries
	b := projectiontest.Bus(t)
	first, rest := es[:len(es)/2], es[len(es)/2:]
	w := projectiontest.NewWriter(t, b)
	ctx := context.Background()
	if _, err := w.Write(ctx, first); err != nil {
		t.Fatal(err)
	}
	live := openDB(t)
	rl := runtime(&projections.Runtime{Bus: b, BatchSize: 200}, execstats.New(live, projections.SQLite), "execstats")
	projectiontest.Start(t, rl)

	load := make(chan error, 1)
	go func() { // a steady load while the rebuild runs
		for i := 0; i < len(rest); i += 500 {
			if _, err := w.Write(ctx, rest[i:min(i+500, len(rest))]); err != nil {
				load <- err
				return
			}
		}
		load <- nil
	}()
	fresh := openDB(t)
	if _, err := projections.RebuildHandler(ctx, b, execstats.New(fresh, projections.SQLite),
		projections.RebuildOptions{Key: "execstats-next", Filter: execstats.Filter}); err != nil {
		t.Fatalf("rebuild: %v", err)
	}
	// Switch-over: the rebuilt target follows the stream from where the rebuild stopped.
	rn := runtime(&projections.Runtime{Bus: b, BatchSize: 200}, execstats.New(fresh, projections.SQLite), "execstats-next")
	projectiontest.Start(t, rn)
	if err := <-load; err != nil {
		t.Fatalf("load: %v", err)
	}
	last := projectiontest.LastSeq(t, b, execstats.Filter)
	projectiontest.Await(t, rl, last, 2*time.Minute)
	projectiontest.Await(t, rn, last, 2*time.Minute)
	want := expected(es)
	for name, db := range map[string]*sql.DB{"live": live, "rebuilt": fresh} {
		if got := stats(t, db); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: stats differ from the in-memory figures (live %+v, rebuilt %+v)", name, rl.Progress(), rn.Progress())
		}
	}
	if err := execstats.Verify(ctx, live, projections.SQLite, fresh, projections.SQLite); err != nil {
		t.Fatalf("rebuilt beside live differs: %v", err)
	}
}

// The projection's definition (what cmd/projector registers) names it and has
// a verifier.
func TestDefinition(t *testing.T) {
	d := execstats.Definition()
	if d.Name != execstats.Name || d.Open == nil || d.Verify == nil || d.UsesStore {
		t.Fatalf("definition = %+v", d)
	}
	var err error
	db1, db2 := openDB(t), openDB(t)
	ctx := context.Background()
	for _, db := range []*sql.DB{db1, db2} {
		if _, err := execstats.New(db, projections.SQLite).Offset(ctx, "x"); err != nil {
			t.Fatal(err)
		}
	}
	// One differing row is a mismatch.
	if _, err := db2.Exec(`INSERT INTO execstats_execs VALUES (1, 'img', 'n', '2026-11-01', 5, 0)`); err != nil {
		t.Fatal(err)
	}
	err = d.Verify(ctx, projections.Target{DB: db1, Dialect: projections.SQLite}, projections.Target{DB: db2, Dialect: projections.SQLite})
	if !errors.Is(err, projections.ErrMismatch) {
		t.Fatalf("Verify = %v, want ErrMismatch", err)
	}
	_ = fmt.Sprint()
}

// The fixture's recorded history holds what its plan ran, one session per
// sandbox (checked here, where the fixture is built anyway).
func TestFixtureRanThePlan(t *testing.T) {
	h := fixture.Get(t)
	if n := len(h.Entries); n < 9000 || n > 12000 {
		t.Fatalf("%d entries, want ~10k", n)
	}
	count := map[events.Event]int{}
	ids := map[string]bool{}
	for _, e := range h.Entries {
		count[e.Event]++
		ids[e.SandboxID] = true
	}
	var execs, paused, closed int
	for _, s := range h.Sandboxes {
		execs += len(s.Execs)
		if s.Paused {
			paused++
		}
		if s.Closed {
			closed++
		}
		if !ids[s.ID] {
			t.Errorf("sandbox %d (%s) recorded nothing", s.Index, s.ID)
		}
	}
	if len(ids) != fixture.Sandboxes {
		t.Errorf("%d sandbox ids recorded, want %d", len(ids), fixture.Sandboxes)
	}
	for ev, want := range map[events.Event]int{events.SandboxCreated: fixture.Sandboxes, events.ExecStarted: execs,
		events.ExecCompleted: execs, events.SandboxPaused: paused, events.SandboxResumed: paused, events.SandboxClosed: closed} {
		if count[ev] != want {
			t.Errorf("%d %s, want %d", count[ev], ev, want)
		}
	}
	t.Logf("%d entries built in %v: %v", len(h.Entries), h.Built, count)
}
