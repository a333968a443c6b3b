package audit

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/alineo-labs/alineo/events"
	"github.com/alineo-labs/alineo/projections"
)

// Name is the projection's registered name.
const Name = "audit"

// Filter is what the projection reads.
var Filter = projections.Filter{Events: []events.Event{events.CredentialBound, events.CredentialRevoked,
	events.EgressRuleAdded, events.EgressRuleRemoved, events.SandboxCreated}}

// Definition returns the projection as cmd/projector runs, rebuilds and
// verifies it by Name (projections.Register).
func Definition() projections.Definition {
	return projections.Definition{
		Name:   Name,
		Help:   "credentials bound per sandbox and host, egress rule changes over time",
		Filter: Filter,
		Open: func(_ context.Context, t projections.Target) (projections.Handler, error) {
			return New(t.DB, t.Dialect), nil
		},
		Verify: func(ctx context.Context, a, b projections.Target) error { return Verify(ctx, a.DB, b.DB) },
	}
}

// New returns the projection's handler on db.
func New(db *sql.DB, d projections.Dialect) *projections.SQLHandler {
	return &projections.SQLHandler{DB: db, Dialect: d, Name: Name, Schema: schema, ApplyTx: func(ctx context.Context, tx *sql.Tx, es []events.Entry) error {
		return apply(ctx, tx, d, es)
	}}
}

func schema(ctx context.Context, tx *sql.Tx) error {
	for _, q := range []string{
		`CREATE TABLE IF NOT EXISTS audit_credentials (
			seq BIGINT PRIMARY KEY, ts BIGINT NOT NULL, name TEXT NOT NULL, sandbox_id TEXT NOT NULL,
			credential TEXT NOT NULL, action TEXT NOT NULL, hosts TEXT NOT NULL, type TEXT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS audit_egress (
			seq BIGINT PRIMARY KEY, ts BIGINT NOT NULL, name TEXT NOT NULL, sandbox_id TEXT NOT NULL,
			change TEXT NOT NULL, action TEXT NOT NULL, target TEXT NOT NULL)`,
		`CREATE INDEX IF NOT EXISTS audit_egress_sandbox ON audit_egress (sandbox_id, seq)`,
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return err
		}
	}
	return nil
}

// Egress changes.
const (
	Added   = "added"
	Removed = "removed"
	Default = "default" // the policy default the sandbox was created with
)

func apply(ctx context.Context, tx *sql.Tx, d projections.Dialect, es []events.Entry) error {
	insCred := d.Rebind(`INSERT INTO audit_credentials (seq, ts, name, sandbox_id, credential, action, hosts, type) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`)
	insEgress := d.Rebind(`INSERT INTO audit_egress (seq, ts, name, sandbox_id, change, action, target) VALUES (?, ?, ?, ?, ?, ?, ?)`)
	for _, e := range es {
		var err error
		switch e.Event {
		case events.CredentialBound, events.CredentialRevoked:
			var p events.CredentialPayload
			if jerr := json.Unmarshal(e.Payload, &p); jerr != nil {
				return projections.Poison(e.Seq, jerr)
			}
			action, hosts, typ := "revoked", "", ""
			if e.Event == events.CredentialBound {
				action = "bound"
				if p.Binding != nil {
					hosts, typ = strings.Join(p.Binding.Hosts, ","), p.Binding.Type
				}
			}
			_, err = tx.ExecContext(ctx, insCred, int64(e.Seq), e.Ts, e.Name, e.SandboxID, p.Name, action, hosts, typ)
		case events.EgressRuleAdded, events.EgressRuleRemoved:
			var p events.EgressRulePayload
			if jerr := json.Unmarshal(e.Payload, &p); jerr != nil {
				return projections.Poison(e.Seq, jerr)
			}
			change := Added
			if e.Event == events.EgressRuleRemoved {
				change = Removed
			}
			_, err = tx.ExecContext(ctx, insEgress, int64(e.Seq), e.Ts, e.Name, e.SandboxID, change, string(p.Action), p.Target)
		case events.SandboxCreated:
			var p events.SandboxCreatedPayload
			if jerr := json.Unmarshal(e.Payload, &p); jerr != nil {
				return projections.Poison(e.Seq, jerr)
			}
			if p.EgressDefault != "" {
				_, err = tx.ExecContext(ctx, insEgress, int64(e.Seq), e.Ts, e.Name, e.SandboxID, Default, string(p.EgressDefault), "")
			}
		}
		if err != nil {
			return fmt.Errorf("audit %s at %d: %w", e.Event, e.Seq, err)
		}
	}
	return nil
}

// Binding is one credential bound in one sandbox for one host.
type Binding struct {
	Host, Credential, Type string
	Name, SandboxID        string
	BoundAt                int64 // Ts of credential.bound
	RevokedAt              int64 // Ts of the credential.revoked that ended it, 0 while bound
}

// Bindings returns every binding ordered by host, then bound time, then
// sandbox: who could use which credential against which host, and until when.
func Bindings(ctx context.Context, db *sql.DB) ([]Binding, error) {
	rows, err := db.QueryContext(ctx, `SELECT ts, name, sandbox_id, credential, action, hosts, type FROM audit_credentials ORDER BY seq`)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer rows.Close()
	var out []Binding
	open := map[[3]string][]int{} // (name, sandbox, credential) → indexes of open bindings
	for rows.Next() {
		var ts int64
		var name, id, cred, action, hosts, typ string
		if err := rows.Scan(&ts, &name, &id, &cred, &action, &hosts, &typ); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		k := [3]string{name, id, cred}
		if action == "revoked" {
			for _, i := range open[k] {
				out[i].RevokedAt = ts
			}
			delete(open, k)
			continue
		}
		for _, h := range strings.Split(hosts, ",") {
			open[k] = append(open[k], len(out))
			out = append(out, Binding{Host: h, Credential: cred, Type: typ, Name: name, SandboxID: id, BoundAt: ts})
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	slices.SortStableFunc(out, func(a, b Binding) int {
		if c := strings.Compare(a.Host, b.Host); c != 0 {
			return c
		}
		if a.BoundAt != b.BoundAt {
			return int(min(max(a.BoundAt-b.BoundAt, -1), 1))
		}
		return strings.Compare(a.SandboxID, b.SandboxID)
	})
	return out, nil
}

// Change is one egress change of a sandbox.
type Change struct {
	Ts     int64
	Change string // Added, Removed or Default
	Action events.EgressAction
	Target string // "" for Default
}

// EgressHistory returns a sandbox's egress changes in ledger order.
func EgressHistory(ctx context.Context, db *sql.DB, d projections.Dialect, sandboxID string) ([]Change, error) {
	rows, err := db.QueryContext(ctx, d.Rebind(`SELECT ts, change, action, target FROM audit_egress WHERE sandbox_id = ? ORDER BY seq`), sandboxID)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer rows.Close()
	var out []Change
	for rows.Next() {
		var c Change
		if err := rows.Scan(&c.Ts, &c.Change, &c.Action, &c.Target); err != nil {
			return nil, fmt.Errorf("audit: %w", err)
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Verify compares both tables of two targets row for row.
func Verify(ctx context.Context, a, b *sql.DB) error {
	for _, q := range []struct{ table, query string }{
		{"audit_credentials", `SELECT seq, ts, name, sandbox_id, credential, action, hosts, type FROM audit_credentials ORDER BY seq`},
		{"audit_egress", `SELECT seq, ts, name, sandbox_id, change, action, target FROM audit_egress ORDER BY seq`},
	} {
		ra, err := dump(ctx, a, q.query)
		if err != nil {
			return err
		}
		rb, err := dump(ctx, b, q.query)
		if err != nil {
			return err
		}
		for i := range max(len(ra), len(rb)) {
			x, y := "(none)", "(none)"
			if i < len(ra) {
				x = ra[i]
			}
			if i < len(rb) {
				y = rb[i]
			}
			if x != y {
				return &projections.MismatchError{Where: q.table, Index: i, A: x, B: y}
			}
		}
	}
	return nil
}

func dump(ctx context.Context, db *sql.DB, q string) ([]string, error) {
	rows, err := db.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []string
	for rows.Next() {
		vals := make([]any, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		for i, v := range vals {
			if b, ok := v.([]byte); ok {
				vals[i] = string(b)
			}
		}
		out = append(out, fmt.Sprint(vals...))
	}
	return out, rows.Err()
}
