package runtime

import "errors"

var (
	// ErrIsolationUnavailable reports that sandboxes cannot be isolated: no
	// usable OCI runtime (Config.Runtime), or one that cannot start.
	// Config.NoIsolation runs sandboxes without one, for development only.
	ErrIsolationUnavailable = errors.New("isolation unavailable")
	// ErrInitNotStatic reports a launch whose image cannot run the sandbox
	// init: it is dynamically linked and the image lacks its interpreter or
	// libraries (see Config.InitBinary).
	ErrInitNotStatic = errors.New("sandbox init not statically linked")
	// ErrInitBinary reports a Config.InitBinary that is not a sandbox init
	// speaking this sandboxd's protocol.
	ErrInitBinary = errors.New("unusable sandbox init")
	// ErrLeavesRoot is a volume directory reached through a symbolic link (or
	// otherwise leaving its root), which volumes never follow.
	ErrLeavesRoot = errors.New("leaves the volume root")
)

// errFreezeTimeout: the group did not reach the state asked for in time (a
// task in uninterruptible sleep can hold a v1 freezer in FREEZING).
var errFreezeTimeout = errors.New("the cgroup freezer did not settle")

// errOldRuntime is a runc without the fixes of runcFixed.
var errOldRuntime = errors.New("runc is older than the fixes of CVE-2025-31133, -52565 and -52881 (1.2.8, 1.3.3, 1.4.0)")

// errNoPIDFile: the runtime exited without writing its pid file.
var errNoPIDFile = errors.New("the runtime exited before it wrote its pid file")

// ExitError is a start-up failure because the entrypoint exited.
type ExitError struct{ error }

// Unwrap returns the failure.
func (e *ExitError) Unwrap() error { return e.error }
