package proctree

import (
	"testing"
)

func TestParentPID(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want int
		ok   bool
	}{
		{"plain", "42 (sh) S 7 42 42 0 -1", 7, true},
		{"spaces and parens in comm", "42 (a b) (c)) R 9 1 1", 9, true},
		{"no comm", "42 sh S 7", 0, false},
		{"truncated", "42 (sh) S", 0, false},
		{"not a number", "42 (sh) S x 1", 0, false},
		{"empty", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parentPID([]byte(tt.stat))
			if got != tt.want || ok != tt.ok {
				t.Fatalf("parentPID(%q) = %d, %v, want %d, %v", tt.stat, got, ok, tt.want, tt.ok)
			}
		})
	}
}

func FuzzParentPID(f *testing.F) {
	f.Add([]byte("42 (sh) S 7 42 42"))
	f.Add([]byte("1 ()) ) Z 0"))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = parentPID(b)
	})
}
