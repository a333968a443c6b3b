package events

import (
	"strconv"
	"testing"
)

// FuzzCanonicalInteger checks number's fast path for integers against the
// float64 round trip it skips: ECMAScript's form of the parsed value.
func FuzzCanonicalInteger(f *testing.F) {
	for _, n := range []int64{0, 1, -1, 7, 999_999_999_999_999, -999_999_999_999_999, 1_000_000_000_000_000, 9_007_199_254_740_993} {
		f.Add(n, false)
	}
	f.Add(int64(0), true)
	f.Fuzz(func(t *testing.T, n int64, negZero bool) {
		lit := strconv.FormatInt(n, 10)
		if negZero && n == 0 {
			lit = "-0"
		}
		v, err := strconv.ParseFloat(lit, 64)
		if err != nil {
			t.Fatal(err)
		}
		want := string(appendES6Number(nil, v))
		got, err := AppendCanonicalJSON(nil, []byte(lit))
		if err != nil || string(got) != want {
			t.Fatalf("AppendCanonicalJSON(%s) = %s, %v; want %s", lit, got, err, want)
		}
	})
}
