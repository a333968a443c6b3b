// Package oomscore starts a command whose oom_score_adj is set before the
// command runs its first instruction.
//
// Writing /proc/PID/oom_score_adj once exec.Cmd.Start returns leaves a
// window: the command already runs, and a child it forks in that window
// inherits its parent's score, not the one written after. A shell forks its
// first command within microseconds, so under load that window is hit. Start
// closes it: the child asks to be traced (PTRACE_TRACEME), stops at its
// execve before the new program runs, gets its score and is let go. Only
// that one exec is traced: what the program forks and runs later is not. As
// for any traced exec, the kernel may ignore a set-user-ID bit of the program
// started (not of those it runs): a command that must start one directly
// runs it through a shell, as execd's commands do.
//
// Of this module it imports nothing: only the standard library and golang.org/x/sys.
package oomscore
