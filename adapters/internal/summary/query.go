package summary

import (
	"strings"

	"github.com/alineo-labs/alineo/adapters"
)

// Query returns the WHERE, ORDER BY and LIMIT clauses of a details list over the summary
// table: name (when not nil) and the filters of opts, sessions without a sandbox.created left
// out, newest first. arg records a parameter and returns its placeholder in the driver's
// syntax ("?" or "$n"); Query calls it in the order the parameters appear.
func Query(name *string, opts adapters.ListOptions, arg func(v any) string) string {
	where := []string{"started_at IS NOT NULL"}
	if name != nil {
		where = append(where, "name = "+arg(*name))
	}
	if opts.Status != "" {
		where = append(where, "status = "+arg(string(opts.Status)))
	}
	if opts.Before != 0 {
		where = append(where, "started_at < "+arg(opts.Before))
	}
	if opts.RunID != "" {
		// run_id is set whenever started_at is (the runId, or the sandbox id).
		where = append(where, "run_id = "+arg(opts.RunID))
	}
	if opts.SandboxID != "" {
		where = append(where, "sandbox_id = "+arg(opts.SandboxID))
	}
	q := ` WHERE ` + strings.Join(where, " AND ") + ` ORDER BY started_at DESC, name, sandbox_id`
	if opts.Limit > 0 {
		q += ` LIMIT ` + arg(int64(opts.Limit))
	}
	return q
}
