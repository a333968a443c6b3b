package snapshots

import "github.com/alineo-labs/alineo/checkpoints"

// IDRange is the range of host ids a sandbox's files are owned by on disk
// (its user namespace maps the sandbox's ids 0..Size-1 to Base..). A
// checkpoint records the ids the sandbox sees, so that it restores into a
// sandbox of any range, on any host: Snapshot shifts the owners it captures
// down by Base, Restore shifts them up. The zero IDRange records and
// restores host ids as they are (a tree that is no sandbox's).
type IDRange struct {
	// Base is the host id of the sandbox's id 0.
	Base int
	// Size is the number of ids in the range.
	Size int
	// Legacy, when not 0, is the base of the one range that every sandbox
	// shared in versions that recorded host ids: on restore, a recorded id
	// in Legacy..Legacy+Size-1 is taken as that range's.
	Legacy int
}

// overflowID is the id a sandbox sees for a host id outside its range
// (the kernel's overflowuid, "nobody").
const overflowID = 65534

// recorded returns the id a sandbox of r sees for host id id.
func (r IDRange) recorded(id int) int {
	if r.Base == 0 {
		return id
	}
	if id >= r.Base && id < r.Base+r.Size {
		return id - r.Base
	}
	return overflowID
}

// host returns the host id of recorded id id in r.
func (r IDRange) host(id int) int {
	if r.Base == 0 {
		return id
	}
	if r.Legacy != 0 && id >= r.Legacy && id < r.Legacy+r.Size {
		id -= r.Legacy
	}
	if id < 0 || id >= r.Size {
		id = overflowID
	}
	return r.Base + id
}

// shift returns entries with each owner mapped by f (a copy: entries may be
// a stored checkpoint's).
func shift(entries []checkpoints.Entry, f func(int) int) []checkpoints.Entry {
	out := make([]checkpoints.Entry, len(entries))
	for i, e := range entries {
		if e.Kind != checkpoints.KindWhiteout {
			e.UID, e.GID = f(e.UID), f(e.GID)
		}
		out[i] = e
	}
	return out
}
