package runtime

import (
	"debug/elf"
	"fmt"
	"path"
	goruntime "runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// What sandboxd puts into a sandbox is one binary: its init, which re-executes
// itself as execd. Bind-mounted into roots built from images, it must run
// whatever libc the image has or lacks, so it must be statically linked (a
// Go program built with CGO_ENABLED=0, as the Makefile builds every binary).
// A dynamically linked one (a plain `go build` with cgo on) is kept for the
// roots that have what it needs (the host image) and refused, at create and
// with the fix in the message, in the others: injecting the host's loader and
// libc into an image would put the host's files into the sandbox's root.

// elfDeps returns the ELF interpreter of the executable at p ("" for a
// static one) and the libraries it needs.
func elfDeps(p string) (string, []string, error) {
	f, err := elf.Open(p)
	if err != nil {
		return "", nil, fmt.Errorf("read the sandbox init %s: %w", p, err)
	}
	defer f.Close()
	var interp string
	for _, prog := range f.Progs {
		if prog.Type != elf.PT_INTERP {
			continue
		}
		b := make([]byte, prog.Filesz)
		if _, err := prog.ReadAt(b, 0); err != nil {
			return "", nil, fmt.Errorf("read the interpreter of %s: %w", p, err)
		}
		interp = strings.TrimRight(string(b), "\x00")
	}
	if interp == "" {
		return "", nil, nil
	}
	libs, err := f.ImportedLibraries()
	if err != nil {
		return "", nil, fmt.Errorf("read the libraries of %s: %w", p, err)
	}
	return interp, libs, nil
}

// StaticBinary reports whether the executable at p is statically linked
// (has no ELF interpreter), as the sandbox init must be to run in any image.
func StaticBinary(p string) (bool, error) {
	interp, _, err := elfDeps(p)
	return interp == "", err
}

// libDirs are where a dynamically linked init's libraries are looked for.
func libDirs() []string {
	triplet := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[goruntime.GOARCH]
	dirs := []string{"/lib", "/usr/lib", "/lib64", "/usr/lib64"}
	if triplet != "" {
		dirs = append(dirs, "/lib/"+triplet, "/usr/lib/"+triplet)
	}
	return dirs
}

// checkInit fails, with the fix in the message, if the init is dynamically
// linked and the sandbox's root (mounted at root) lacks its interpreter or
// one of its libraries.
func (r *Runtime) checkInit(root, image string) error {
	if r.initInterp == "" {
		return nil
	}
	var missing []string
	if !inRoot(root, r.initInterp) {
		missing = append(missing, r.initInterp)
	}
	for _, lib := range r.initLibs {
		found := false
		for _, d := range libDirs() {
			if inRoot(root, path.Join(d, lib)) {
				found = true
				break
			}
		}
		if !found {
			missing = append(missing, lib)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: the sandbox init is dynamically linked (interpreter %s, libraries %s) and image %s lacks %s: run a statically linked sandboxd (CGO_ENABLED=0, as `make build` builds it) or give Config.InitBinary (--init-binary) a static build",
		ErrInitNotStatic, r.initInterp, strings.Join(r.initLibs, ", "), image, strings.Join(missing, ", "))
}

// inRoot reports whether p exists in the tree at root, its symlinks
// resolved as inside it (never into the host).
func inRoot(root, p string) bool {
	dfd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat2(dfd, strings.TrimPrefix(p, "/"), &unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT})
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}
