package api

import (
	"context"
	"slices"

	"github.com/alineo-labs/alineo/adapters"
	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/jobs"
)

// maxRunSessions bounds the sessions a run page reads.
const maxRunSessions = 500

// lineageNode is one session of a run and the sessions that came from it.
type lineageNode struct {
	Details adapters.SandboxDetails
	Rel     relation
	Via     string       // the parent's checkpoint the child came from, or ""
	Parent  *lineageNode // the session this one came from, when it is in this run
	Orphan  bool         // Rel names a parent that is not in this run
	// Children came from this session.
	Children []*lineageNode
}

// lineage is a run's sessions as a forest: environments and parentless
// sessions at the roots.
type lineage struct {
	RunID string
	Roots []*lineageNode
	Count int
	// Environments the run's sessions were spawned from, each with those
	// sessions, in order of first use.
	Environments []*envGroup
}

// envGroup is an environment and the sessions spawned from it.
type envGroup struct {
	Env   adapters.EnvironmentRecord
	Nodes []*lineageNode
}

// buildLineage reads the sessions of run runID and links each to its parent:
// the session it resumed, or the session whose checkpoint it forked or was
// restored from.
func buildLineage(ctx context.Context, st Store, runID string) (*lineage, error) {
	ds, err := st.ListAllSandboxDetails(ctx, adapters.ListOptions{RunID: runID, Limit: maxRunSessions})
	if err != nil {
		return nil, err
	}
	// Oldest first, so children follow their parents.
	slices.SortStableFunc(ds, func(a, b adapters.SandboxDetails) int { return cmpInt(a.StartedAt, b.StartedAt) })
	nodes := make([]*lineageNode, len(ds))
	bySandbox := map[string]*lineageNode{}
	bySnapshot := map[string]*lineageNode{}
	for i, d := range ds {
		n := &lineageNode{Details: d}
		nodes[i] = n
		if _, ok := bySandbox[d.SandboxID]; !ok {
			bySandbox[d.SandboxID] = n
		}
		es, err := st.ReadAll(ctx, d.Name, d.SandboxID)
		if err != nil {
			return nil, err
		}
		n.Rel = relationOf(createdPayload(es))
		cps, err := st.ListCheckpoints(ctx, d.Name, d.SandboxID)
		if err != nil {
			return nil, err
		}
		for _, cp := range cps {
			bySnapshot[cp.SnapshotID] = n
		}
	}
	l := &lineage{RunID: runID, Count: len(nodes)}
	envs := map[string]*envGroup{}
	for _, n := range nodes {
		var parent *lineageNode
		switch n.Rel.Kind {
		case "":
		case "resumed from":
			parent = bySandbox[n.Rel.From]
		case "spawned from environment":
			g := envs[n.Rel.From]
			if g == nil {
				g = &envGroup{Env: adapters.EnvironmentRecord{Name: n.Rel.From}}
				envs[n.Rel.From] = g
				l.Environments = append(l.Environments, g)
			}
			g.Nodes = append(g.Nodes, n)
			continue
		default:
			parent = bySnapshot[n.Rel.From]
			n.Via = n.Rel.From
		}
		if parent == n {
			parent = nil
		}
		if parent == nil {
			n.Orphan = n.Rel.Kind != ""
			l.Roots = append(l.Roots, n)
			continue
		}
		n.Parent = parent
		parent.Children = append(parent.Children, n)
	}
	if len(envs) > 0 {
		recs, err := st.ListEnvironments(ctx)
		if err != nil {
			return nil, err
		}
		for _, e := range recs {
			if g := envs[e.Name]; g != nil {
				g.Env = e
			}
		}
	}
	return l, nil
}

func createdPayload(es []events.Entry) *events.SandboxCreatedPayload {
	for _, e := range es {
		if e.Event.Is(events.SandboxCreated) {
			var p events.SandboxCreatedPayload
			if e.Decode(&p) == nil {
				return &p
			}
			return nil
		}
	}
	return nil
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// jobAttempt is one session a job ran in, and how it ended.
type jobAttempt struct {
	Details  adapters.SandboxDetails
	Current  bool
	Closed   *events.SandboxClosedPayload
	ClosedAt int64
	// Execs are the steps that ran (or were replayed) in the session.
	Execs []*execView
}

// jobAttempts finds the sessions job st ran in: its current session and the
// sessions of the same run whose sandbox.closed names the job (a takeover
// or a failure ended them), oldest first.
func jobAttempts(ctx context.Context, store Store, st jobs.Status) ([]jobAttempt, error) {
	if st.SandboxID == "" {
		return nil, nil
	}
	cur, err := store.ListAllSandboxDetails(ctx, adapters.ListOptions{SandboxID: st.SandboxID, Limit: 10})
	if err != nil || len(cur) == 0 {
		return nil, err
	}
	run := cur[0].RunID
	ds, err := store.ListAllSandboxDetails(ctx, adapters.ListOptions{RunID: run, Limit: maxRunSessions})
	if err != nil {
		return nil, err
	}
	var out []jobAttempt
	for _, d := range ds {
		a := jobAttempt{Details: d, Current: d.SandboxID == st.SandboxID}
		es, err := store.ReadAll(ctx, d.Name, d.SandboxID)
		if err != nil {
			return nil, err
		}
		for _, e := range es {
			if e.Event.Is(events.SandboxClosed) {
				var p events.SandboxClosedPayload
				if e.Decode(&p) == nil && p.Job != "" {
					a.Closed, a.ClosedAt = &p, e.Ts
				}
			}
		}
		a.Execs = buildSession(es).Execs
		if a.Current || (a.Closed != nil && a.Closed.Job == st.ID) {
			out = append(out, a)
		}
	}
	slices.SortStableFunc(out, func(a, b jobAttempt) int { return cmpInt(a.Details.StartedAt, b.Details.StartedAt) })
	return out, nil
}

// Takeovers counts the attempts a takeover ended.
func takeovers(as []jobAttempt) int {
	n := 0
	for _, a := range as {
		if a.Closed != nil && a.Closed.Reason == events.ClosedTakenOver {
			n++
		}
	}
	return n
}
