package mountinfo

import (
	"bufio"
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// table is a mountinfo of n sandboxes' mounts below /run/sbx beside the
// host's, with the odd lines a parser meets: an escaped space, a path that
// only shares a prefix with the one asked, a short line.
func table(n int) string {
	var b strings.Builder
	b.WriteString("22 27 0:21 / /proc rw,relatime - proc proc rw\n")
	b.WriteString("24 27 0:6 / /dev rw,relatime - devtmpfs devtmpfs rw,size=12334460k,mode=755\n")
	b.WriteString("short line\n")
	for i := range n {
		for _, sub := range []string{"root", "root/usr", "root/etc", "root/bin", "disk"} {
			fmt.Fprintf(&b, "%d 27 0:%d / /run/sbx/sb-%d/%s rw,relatime shared:1 - overlay overlay rw,lowerdir=/usr,upperdir=/x,workdir=/y\n", 100+i, 50+i, i, sub)
		}
	}
	b.WriteString("900 27 0:99 / /run/sbx/sb-1/with\\040space rw - tmpfs tmpfs rw\n")
	b.WriteString("901 27 0:99 / /run/sbx/sb-10x rw - tmpfs tmpfs rw\n")
	return b.String()
}

// fieldsBelow is the straightforward reading (each line split in fields,
// every mount point unescaped): the oracle of below, and its benchmark's
// baseline.
func fieldsBelow(s string, dirs []string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 5 {
			continue
		}
		p := Unescape(f[4])
		for _, d := range dirs {
			d = filepath.Clean(d)
			if p == d || strings.HasPrefix(p, d+"/") {
				out = append(out, p)
				break
			}
		}
	}
	slices.SortFunc(out, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	return slices.Compact(out)
}

func TestBelowReadsTheTable(t *testing.T) {
	s := table(20)
	for _, dirs := range [][]string{
		{"/run/sbx/sb-1"},
		{"/run/sbx/sb-1/"},
		{"/run/sbx/sb-10", "/run/sbx/sb-3/root"},
		{"/run/sbx/sb-1/with space"},
		{"/run"},
		{"/nowhere"},
		{"/proc", "/dev"},
	} {
		got, err := below(strings.NewReader(s), dirs)
		if err != nil {
			t.Fatal(err)
		}
		if want := fieldsBelow(s, dirs); !slices.Equal(got, want) {
			t.Errorf("below(%q) = %q, want %q", dirs, got, want)
		}
	}
	got, _ := below(strings.NewReader(s), []string{"/run/sbx/sb-1"})
	want := []string{"/run/sbx/sb-1/with space", "/run/sbx/sb-1/root/usr", "/run/sbx/sb-1/root/etc", "/run/sbx/sb-1/root/bin", "/run/sbx/sb-1/root", "/run/sbx/sb-1/disk"}
	slices.SortFunc(want, func(a, b string) int { return cmp.Or(len(b)-len(a), strings.Compare(a, b)) })
	if !slices.Equal(got, want) {
		t.Errorf("sb-1's mounts = %q, want %q (not sb-10's, nor sb-10x)", got, want)
	}
}

// BenchmarkBelow: one sandbox's mounts out of a table of 100 sandboxes (500
// mounts), as sandboxd looks them up at each delete. ratio = below's time /
// the field-splitting reading's (lower is better).
func BenchmarkBelow(b *testing.B) {
	s := table(100)
	dirs := []string{"/run/sbx/sb-42"}
	var fast, slow float64
	for b.Loop() {
		start := nowNanos()
		if _, err := below(strings.NewReader(s), dirs); err != nil {
			b.Fatal(err)
		}
		mid := nowNanos()
		fieldsBelow(s, dirs)
		fast += float64(mid - start)
		slow += float64(nowNanos() - mid)
	}
	b.ReportMetric(fast/float64(b.N)/1e3, "below-us")
	b.ReportMetric(slow/float64(b.N)/1e3, "fields-us")
	b.ReportMetric(fast/slow, "ratio")
}

func nowNanos() int64 { return time.Now().UnixNano() }
