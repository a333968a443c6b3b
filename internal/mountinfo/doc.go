// Package mountinfo lists the mount points of this process's mount namespace
// from /proc/self/mountinfo: what sandboxd unmounts before removing a
// sandbox's directory, and what the soak unmounts after an aborted run.
//
// Of this module it imports nothing.
package mountinfo
