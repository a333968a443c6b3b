package sandboxd

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// parseLimits parses resourceLimits: cpu in Kubernetes quantity form ("500m",
// "1", "0.5"), memory with a binary (Ki, Mi, Gi, Ti) or decimal (k, M, G, T)
// suffix or plain bytes, gpu a non-negative integer that must be 0 (no GPUs
// here). Other keys are ignored.
func parseLimits(m map[string]string) (limits, error) {
	var l limits
	for k, v := range m {
		switch k {
		case "cpu":
			n, err := parseCPU(v)
			if err != nil {
				return l, err
			}
			l.MilliCPU = n
		case "memory":
			n, err := parseMemory(v)
			if err != nil {
				return l, err
			}
			l.MemoryBytes = n
		case "gpu":
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 {
				return l, invalid("INVALID_RESOURCE_LIMITS", "resourceLimits.gpu", "invalid gpu count %q", v)
			}
			if n > 0 {
				return l, invalid("INVALID_RESOURCE_LIMITS", "resourceLimits.gpu", "this server has no GPUs (asked for %d)", n)
			}
		}
	}
	return l, nil
}

func parseCPU(v string) (int64, error) {
	s := strings.TrimSpace(v)
	bad := invalid("INVALID_RESOURCE_LIMITS", "resourceLimits.cpu", "invalid cpu quantity %q (want e.g. \"500m\" or \"2\")", v)
	if s == "" {
		return 0, bad
	}
	if n, ok := strings.CutSuffix(s, "m"); ok {
		m, err := strconv.ParseInt(n, 10, 64)
		if err != nil || m <= 0 {
			return 0, bad
		}
		return m, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) || f > 1e6 {
		return 0, bad
	}
	m := int64(math.Ceil(f * 1000))
	return m, nil
}

var memSuffixes = []struct {
	s string
	m float64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50},
	{"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15},
}

func parseMemory(v string) (int64, error) {
	s := strings.TrimSpace(v)
	bad := invalid("INVALID_RESOURCE_LIMITS", "resourceLimits.memory", "invalid memory quantity %q (want e.g. \"512Mi\" or \"2Gi\")", v)
	mult := 1.0
	for _, suf := range memSuffixes {
		if n, ok := strings.CutSuffix(s, suf.s); ok {
			s, mult = n, suf.m
			break
		}
	}
	if s == "" {
		return 0, bad
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f <= 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, bad
	}
	b := f * mult
	if b < 1<<20 {
		return 0, invalid("INVALID_RESOURCE_LIMITS", "resourceLimits.memory", "memory %q is below the 1Mi minimum", v)
	}
	if b > 1<<60 {
		return 0, bad
	}
	return int64(b), nil
}

// ParseSize parses a size as resourceLimits.memory does: plain bytes or a
// binary (Ki, Mi, Gi, Ti, also KiB, MiB, GiB, TiB) or decimal (k, M, G, T)
// suffix.
func ParseSize(v string) (int64, error) {
	v = strings.TrimSpace(v)
	if strings.HasSuffix(v, "iB") {
		v = strings.TrimSuffix(v, "B")
	}
	if v == "0" {
		return 0, nil
	}
	n, err := parseMemory(v)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q", v)
	}
	return n, nil
}
