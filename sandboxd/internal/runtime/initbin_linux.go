package runtime

import (
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	goruntime "runtime"
	"runtime/debug"
	"strings"
	"time"

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

// InitName is the file name of the sandbox init's own program
// (cmd/sandboxd-init), which sandboxd prefers to itself when it lies next to
// sandboxd's executable (initBinary). Every program that imports sandboxd
// can be the init, but each of its starts (the init's, then execd's, in
// every sandbox) runs the init functions of all it links: sandboxd's blob
// drivers alone make that about 20 ms, against 5 for the init's program.
const InitName = "sandboxd-init"

// initProtocol is the version of what sandboxd and the sandbox init say to
// each other: the roles and their environment, the descriptors, initConfig
// and initMsg on the pipes, the execd child's configuration, execd's API.
// Bump it with any change to them (TestInitProtocolMessages holds the
// pipes' messages to it): an init of another protocol is refused.
const initProtocol = 1

// initIdentity is what a sandbox init answers in its "identify" role.
type initIdentity struct {
	Protocol int `json:"protocol"`
	// Build names the module version and VCS revision the binary was built
	// from, as far as its build info knows them ("" for none).
	Build string `json:"build"`
}

// ownIdentity is this binary's initIdentity.
func ownIdentity() initIdentity {
	id := initIdentity{Protocol: initProtocol}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return id
	}
	id.Build = bi.Main.Path + "@" + bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			id.Build += " " + s.Value
		case "vcs.modified":
			if s.Value == "true" {
				id.Build += " modified"
			}
		}
	}
	return id
}

// runIdentify is the "identify" role: it writes the binary's initIdentity.
func runIdentify() int {
	if err := json.NewEncoder(os.Stdout).Encode(ownIdentity()); err != nil {
		return 1
	}
	return 0
}

// identifyTimeout bounds an init's answer to identify.
const identifyTimeout = 10 * time.Second

// identify runs the executable at p in its identify role and returns its
// answer.
func identify(ctx context.Context, p string) (initIdentity, error) {
	ctx, cancel := context.WithTimeout(ctx, identifyTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p)
	cmd.Args = []string{"sandboxd-identify"}
	cmd.Env = []string{initEnv + "=identify"}
	cmd.WaitDelay = time.Second // a child it left holding the pipes
	var out, errOut cappedBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		if msg := strings.TrimSpace(errOut.String()); msg != "" {
			err = fmt.Errorf("%w: %s", err, msg)
		}
		return initIdentity{}, fmt.Errorf("it does not identify itself as a sandbox init: %w", err)
	}
	var id initIdentity
	if err := json.Unmarshal(out.Bytes(), &id); err != nil || id.Protocol == 0 {
		return initIdentity{}, fmt.Errorf("it does not identify itself as a sandbox init: answered %.200q", out.String())
	}
	return id, nil
}

// initBinary returns the sandbox init to bind into sandboxes:
// Config.InitBinary when set, which must speak this sandboxd's protocol
// (checkedInit); else InitName next to this executable when it is of this
// very build, or this executable (preferredInit).
func (r *Runtime) initBinary(ctx context.Context) (string, error) {
	if p := r.cfg.InitBinary; p != "" {
		return r.checkedInit(ctx, p)
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the sandbox init: %w", err)
	}
	if resolved, err := filepath.EvalSymlinks(self); err == nil {
		self = resolved
	}
	return r.preferredInit(ctx, self), nil
}

// checkedInit returns p, the init named by Config.InitBinary, once it
// answered identify with this sandboxd's protocol; else an error wrapping
// ErrInitBinary that says why. Another build speaking the protocol is
// logged and used.
func (r *Runtime) checkedInit(ctx context.Context, p string) (string, error) {
	own := ownIdentity()
	id, err := identify(ctx, p)
	if err != nil {
		return "", fmt.Errorf("%w %s: %w", ErrInitBinary, p, err)
	}
	if id.Protocol != own.Protocol {
		return "", fmt.Errorf("%w %s: it speaks the init protocol %d, this sandboxd %d: build both from the same source", ErrInitBinary, p, id.Protocol, own.Protocol)
	}
	if id.Build != own.Build {
		r.log.Info("sandboxd: the sandbox init is of another build, speaking the same protocol", "init", p, "build", id.Build, "sandboxd", own.Build)
	}
	return p, nil
}

// preferredInit returns InitName in self's directory if it answers identify
// with self's own identity (protocol and build), else self, the executable
// of this program, logging why a sibling found is not used.
func (r *Runtime) preferredInit(ctx context.Context, self string) string {
	sibling := filepath.Join(filepath.Dir(self), InitName)
	if sibling == self {
		return self
	}
	if _, err := os.Stat(sibling); err != nil {
		return self
	}
	own := ownIdentity()
	switch id, err := identify(ctx, sibling); {
	case err != nil:
		r.log.Warn("sandboxd: not using the sandbox init next to this executable", "init", sibling, "err", err)
	case id != own:
		r.log.Warn("sandboxd: not using the sandbox init next to this executable: it is of another build or init protocol (rebuild both, or name it with --init-binary)",
			"init", sibling, "build", id.Build, "protocol", id.Protocol, "sandboxd", own.Build)
	default:
		return sibling
	}
	return self
}

// cappedBuffer keeps the first identifyMaxOutput bytes written to it and
// drops the rest.
type cappedBuffer struct{ bytes.Buffer }

// identifyMaxOutput bounds what is kept of an identify's output.
const identifyMaxOutput = 4 << 10

func (b *cappedBuffer) Write(p []byte) (int, error) {
	if room := identifyMaxOutput - b.Len(); room > 0 {
		b.Buffer.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
