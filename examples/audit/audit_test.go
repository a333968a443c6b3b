package audit_test

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/examples/audit"
	"github.com/alineo-labs/alineo/examples/internal/fixture"
	"github.com/alineo-labs/alineo/projections"
	"github.com/alineo-labs/alineo/projections/projectiontest"
)

func openDB(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "audit.db")+"?_pragma=busy_timeout(5000)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

func runOver(t *testing.T, b *projections.Runtime, db *sql.DB) *projections.Runtime {
	t.Helper()
	b.Handler, b.Name, b.Filter = audit.New(db, projections.SQLite), audit.Name, audit.Filter
	projectiontest.Start(t, b)
	return b
}

// A hand-made history: one credential bound for two hosts then revoked, a
// second one left bound, and egress changes.
func TestKnownFigures(t *testing.T) {
	b := projectiontest.Bus(t)
	ts := time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC).UnixMilli()
	es := []events.Entry{
		events.New(ts, "ci", "sb-1", events.SandboxLevel, events.SandboxCreated, events.SandboxCreatedPayload{SandboxID: "sb-1", EgressDefault: events.Deny}),
		events.New(ts+1, "ci", "sb-1", events.SandboxLevel, events.CredentialBound, events.CredentialPayload{Name: "gh",
			Binding: &events.CredentialBinding{Hosts: []string{"api.github.com", "uploads.github.com"}, Type: "bearer"}}),
		events.New(ts+2, "ci", "sb-1", events.SandboxLevel, events.EgressRuleAdded, events.EgressRulePayload{Action: events.Allow, Target: "api.github.com"}),
		events.New(ts+3, "ci", "sb-1", 1, events.ExecStarted, events.ExecStartedPayload{Seq: 1, Cmd: "git push"}),
		events.New(ts+4, "ci", "sb-1", events.SandboxLevel, events.CredentialRevoked, events.CredentialPayload{Name: "gh"}),
		events.New(ts+5, "ci", "sb-1", events.SandboxLevel, events.EgressRuleRemoved, events.EgressRulePayload{Action: events.Allow, Target: "api.github.com"}),
		events.New(ts+6, "ci", "sb-2", events.SandboxLevel, events.CredentialBound, events.CredentialPayload{Name: "npm",
			Binding: &events.CredentialBinding{Hosts: []string{"registry.npmjs.org"}, Type: "apiKey", Header: "X-Key"}}),
	}
	projectiontest.Publish(t, b, es)
	db := openDB(t)
	r := runOver(t, &projections.Runtime{Bus: b}, db)
	projectiontest.Await(t, r, projectiontest.LastSeq(t, b, audit.Filter), 10*time.Second)
	ctx := context.Background()
	got, err := audit.Bindings(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	want := []audit.Binding{
		{Host: "api.github.com", Credential: "gh", Type: "bearer", Name: "ci", SandboxID: "sb-1", BoundAt: ts + 1, RevokedAt: ts + 4},
		{Host: "registry.npmjs.org", Credential: "npm", Type: "apiKey", Name: "ci", SandboxID: "sb-2", BoundAt: ts + 6},
		{Host: "uploads.github.com", Credential: "gh", Type: "bearer", Name: "ci", SandboxID: "sb-1", BoundAt: ts + 1, RevokedAt: ts + 4},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("bindings = %+v\nwant %+v", got, want)
	}
	hist, err := audit.EgressHistory(ctx, db, projections.SQLite, "sb-1")
	if err != nil {
		t.Fatal(err)
	}
	wantHist := []audit.Change{{ts, audit.Default, events.Deny, ""}, {ts + 2, audit.Added, events.Allow, "api.github.com"}, {ts + 5, audit.Removed, events.Allow, "api.github.com"}}
	if !reflect.DeepEqual(hist, wantHist) {
		t.Fatalf("egress history = %+v\nwant %+v", hist, wantHist)
	}
	if p := r.Progress(); p.Applied != 6 {
		t.Fatalf("applied %d, want 6 (the exec.started is filtered out by JetStream)", p.Applied)
	}
}

// The history the SDK recorded on sandboxd gives the bindings and egress
// changes the fixture's plan made: which sandbox bound which credential for
// which hosts, which were revoked, each sandbox's rule changes in order. The
// times are those of the recorded entries. Two partitioned workers give the
// same rows as one.
func TestRecordedHistoryAndPartitions(t *testing.T) {
	h := fixture.Get(t)
	last := projectiontest.LastSeq(t, h.Bus, audit.Filter)
	single := openDB(t)
	r := runOver(t, &projections.Runtime{Bus: h.Bus, Consumer: "audit-recorded"}, single)
	projectiontest.Await(t, r, last, 2*time.Minute)
	ctx := context.Background()

	// When each credential was bound and revoked, from the recorded entries.
	type credKey struct{ id, name string }
	boundAt, revokedAt := map[credKey]int64{}, map[credKey]int64{}
	egressTs := map[string][]int64{}
	for _, e := range h.Entries {
		switch e.Event {
		case events.CredentialBound, events.CredentialRevoked:
			var p events.CredentialPayload
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			if e.Event == events.CredentialBound {
				boundAt[credKey{e.SandboxID, p.Name}] = e.Ts
			} else {
				revokedAt[credKey{e.SandboxID, p.Name}] = e.Ts
			}
		case events.EgressRuleAdded, events.EgressRuleRemoved, events.SandboxCreated:
			egressTs[e.SandboxID] = append(egressTs[e.SandboxID], e.Ts)
		}
	}
	var want []audit.Binding
	revoked, hosts := 0, map[string]int{}
	for _, s := range h.Sandboxes {
		for _, c := range s.Credentials {
			k := credKey{s.ID, c.Name}
			if boundAt[k] == 0 || (revokedAt[k] != 0) != c.Revoked {
				t.Fatalf("sandbox %d credential %s: bound at %d, revoked at %d, planned revoked %v", s.Index, c.Name, boundAt[k], revokedAt[k], c.Revoked)
			}
			for _, host := range c.Hosts {
				want = append(want, audit.Binding{Host: host, Credential: c.Name, Type: c.Type, Name: s.Name, SandboxID: s.ID,
					BoundAt: boundAt[k], RevokedAt: revokedAt[k]})
				hosts[host]++
				if c.Revoked {
					revoked++
				}
			}
		}
	}
	got, err := audit.Bindings(ctx, single)
	if err != nil {
		t.Fatal(err)
	}
	if !sort.IsSorted(byHostTime(got)) {
		t.Fatal("Bindings are not ordered by host, then bound time")
	}
	sortBindings(got)
	sortBindings(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%d bindings differ from the %d the fixture made (first got %+v, want %+v)", len(got), len(want), got[0], want[0])
	}
	if len(want) < 200 || revoked < 50 || len(hosts) != len(fixture.Hosts)+1 {
		t.Fatalf("the plan binds %d (%d revoked) over hosts %v: too few to check", len(want), revoked, hosts)
	}

	// Every sandbox's egress changes: the policy default, its initial rules
	// (recorded last first), then its runtime changes in order.
	for _, s := range h.Sandboxes {
		hist, err := audit.EgressHistory(ctx, single, projections.SQLite, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		wantHist := []audit.Change{{Change: audit.Default, Action: events.Deny}}
		for _, r := range slices.Backward(s.InitialRules) {
			wantHist = append(wantHist, audit.Change{Change: audit.Added, Action: r.Action, Target: r.Target})
		}
		for _, r := range s.Rules {
			c := audit.Change{Change: audit.Added, Action: r.Action, Target: r.Target}
			if r.Removed {
				c.Change = audit.Removed
			}
			wantHist = append(wantHist, c)
		}
		var ts []int64
		for i := range hist {
			ts = append(ts, hist[i].Ts)
			hist[i].Ts = 0
		}
		if !reflect.DeepEqual(hist, wantHist) || !slices.Equal(ts, egressTs[s.ID]) {
			t.Fatalf("sandbox %d egress history = %+v at %v\nwant %+v at %v", s.Index, hist, ts, wantHist, egressTs[s.ID])
		}
	}

	shared := openDB(t)
	var parts []*projections.Runtime
	for i := range 2 {
		parts = append(parts, runOver(t, &projections.Runtime{Bus: h.Bus, Consumer: "audit-part",
			Partition: projections.Partitioning{N: 2, Index: i}}, shared))
	}
	for _, p := range parts {
		projectiontest.Await(t, p, last, 2*time.Minute)
	}
	if err := audit.Verify(ctx, single, shared); err != nil {
		t.Fatalf("partitioned differs from single: %v", err)
	}
}

// byHostTime is the order audit.Bindings documents.
type byHostTime []audit.Binding

func (b byHostTime) Len() int      { return len(b) }
func (b byHostTime) Swap(i, j int) { b[i], b[j] = b[j], b[i] }
func (b byHostTime) Less(i, j int) bool {
	return cmp.Or(cmp.Compare(b[i].Host, b[j].Host), cmp.Compare(b[i].BoundAt, b[j].BoundAt), cmp.Compare(b[i].SandboxID, b[j].SandboxID)) < 0
}

// sortBindings orders bindings totally, for comparing sets.
func sortBindings(bs []audit.Binding) {
	slices.SortFunc(bs, func(a, b audit.Binding) int {
		return cmp.Or(cmp.Compare(a.Host, b.Host), cmp.Compare(a.SandboxID, b.SandboxID), cmp.Compare(a.Credential, b.Credential))
	})
}

func TestMain(m *testing.M) {
	code := m.Run()
	fixture.Close()
	os.Exit(code)
}
