package sandboxd

import "github.com/alineo-labs/alineo/sandboxd/sandboxinit"

// init makes this binary a sandbox init, or one of the init's other roles,
// when the runtime re-executed it so (see sandboxinit.RunRole); else it
// returns.
func init() { sandboxinit.RunRole() }
