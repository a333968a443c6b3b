package testenv

import "testing"

// Target reports got, a benchmark's figure, next to its target want: a metric
// <name>-target and Verdict's line.
func Target(b *testing.B, name string, got, want float64, lowerBetter bool) {
	b.Helper()
	b.ReportMetric(want, name+"-target")
	Verdict(b, name, got, want, lowerBetter)
}

// Verdict logs a line naming the benchmark, its figure got, the target want
// and whether it is met (MET or NOT MET; higher is better unless
// lowerBetter), which make bench gathers into its summary.
func Verdict(b *testing.B, name string, got, want float64, lowerBetter bool) {
	b.Helper()
	op, verdict := judge(got, want, lowerBetter)
	b.Logf("target: %s %s %.3g (target %s %g): %s", b.Name(), name, got, op, want, verdict)
}

// TargetFloor is Target for a figure this machine bounds: floor is the best
// figure any implementation could reach here, measured by the benchmark in
// the same run (the baseline pays nothing of what the target's subject must;
// the floor adds that back at its cheapest). The line names the floor, and
// says when the target lies beyond it.
func TargetFloor(b *testing.B, name string, got, want, floor float64, lowerBetter bool) {
	b.Helper()
	b.ReportMetric(want, name+"-target")
	b.ReportMetric(floor, name+"-floor")
	note := "floor"
	if _, v := judge(floor, want, lowerBetter); v != met {
		note = "beyond this machine's floor"
	}
	op, verdict := judge(got, want, lowerBetter)
	b.Logf("target: %s %s %.3g (target %s %g, %s %.3g): %s", b.Name(), name, got, op, want, note, floor, verdict)
}

const met = "MET"

// judge returns the comparison got must pass and its verdict.
func judge(got, want float64, lowerBetter bool) (op, verdict string) {
	ok, op := got >= want, "≥"
	if lowerBetter {
		ok, op = got <= want, "≤"
	}
	if !ok {
		return op, "NOT " + met
	}
	return op, met
}
