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
	met, op := got >= want, "≥"
	if lowerBetter {
		met, op = got <= want, "≤"
	}
	verdict := "MET"
	if !met {
		verdict = "NOT MET"
	}
	b.Logf("target: %s %s %.3g (target %s %g): %s", b.Name(), name, got, op, want, verdict)
}
