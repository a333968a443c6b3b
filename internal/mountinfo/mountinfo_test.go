package mountinfo

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{
		`/tmp/a\040b\011c`: "/tmp/a b\tc",
		`/plain`:           "/plain",
		`/back\134slash`:   `/back\slash`,
		`/short\04`:        `/short\04`, // not an escape: kept
	} {
		if got := Unescape(in); got != want {
			t.Errorf("Unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

// Below lists a tmpfs mounted in a folder whose name has a space, and one
// mounted inside it, deepest first, and nothing outside the folders asked.
func TestBelow(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir() + "/with space"
	inner := dir + "/inner"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		t.Skipf("mount tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	if err := os.Mkdir(inner, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Unmount(inner, unix.MNT_DETACH) })
	got, err := Below(dir, dir+"/", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != inner || got[1] != dir {
		t.Fatalf("Below = %q, want [%q %q]", got, inner, dir)
	}
}
