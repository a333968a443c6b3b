package runtime

import (
	"errors"
	"testing"
)

func TestCheckRuncVersion(t *testing.T) {
	for _, c := range []struct {
		out      string
		allowOld bool
		old      bool // refused as old
		bad      bool // refused, unreadable
	}{
		{out: "runc version 1.5.3\ncommit: v1.5.3\nspec: 1.3.0\ngo: go1.26"},
		{out: "runc version 1.4.0"},
		{out: "runc version 1.3.3"},
		{out: "runc version 1.2.8"},
		{out: "runc version 2.0.0"},
		{out: "runc version 1.1.5\ncommit: unknown", old: true},
		{out: "runc version 1.1.5", allowOld: true},
		{out: "runc version 1.2.7", old: true},
		{out: "runc version 1.3.2", old: true},
		{out: "runc version 1.0.0-rc93", old: true},
		{out: "runc version dev", bad: true},
		{out: "runc version dev", allowOld: true},
		{out: "crun version 1.8.1"},
		{out: "runsc version release-20250101.0"},
	} {
		err := checkRuncVersion(c.out, c.allowOld)
		switch {
		case c.old && !errors.Is(err, errOldRuntime):
			t.Errorf("%q: %v, want errOldRuntime", c.out, err)
		case c.bad && err == nil:
			t.Errorf("%q: accepted, want an error", c.out)
		case !c.old && !c.bad && err != nil:
			t.Errorf("%q (allowOld %v): %v, want accepted", c.out, c.allowOld, err)
		}
	}
}

// TestCPUQuotaInSpec: a sandbox whose runtime's cgroups sandboxd writes gets
// its CPU period in the spec and its quota unlimited there (written once it
// runs); any other gets the quota in the spec.
func TestCPUQuotaInSpec(t *testing.T) {
	for _, tc := range []struct {
		later bool
		milli int64
		quota int64
	}{{false, 250, 25000}, {true, 250, -1}, {false, 2000, 200000}, {true, 2000, -1}} {
		r := resources(specInput{Limits: Limits{MilliCPU: tc.milli}, CPULater: tc.later})
		if r.CPU == nil || r.CPU.Quota == nil || r.CPU.Period == nil {
			t.Fatalf("%+v: CPU = %+v", tc, r.CPU)
		}
		if *r.CPU.Quota != tc.quota || *r.CPU.Period != 100000 {
			t.Errorf("%+v: quota %d period %d, want %d and 100000", tc, *r.CPU.Quota, *r.CPU.Period, tc.quota)
		}
	}
	if r := resources(specInput{CPULater: true}); r.CPU != nil {
		t.Errorf("no CPU limit: CPU = %+v, want none", r.CPU)
	}
}
