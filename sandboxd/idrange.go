package sandboxd

import (
	"fmt"

	"github.com/alineo-labs/alineo/sandboxd/snapshots"
)

// Each isolated sandbox has a range of IDMapSize host ids of its own: its
// user namespace maps ids 0..IDMapSize-1 to base..base+IDMapSize-1, where base
// is IDMapHost + k*IDMapSize for the lowest k no other live sandbox holds
// (as Kubernetes' user namespaces give each pod its own range). So one
// sandbox's files, processes and key quota are not another's: a file
// mode 600 in one sandbox is out of reach of every other, and a setuid file
// one plants runs as nobody the others know. The range is recorded with the
// sandbox (record.IDBase). Files the server stores outside a sandbox
// (snapshots, managed volumes) hold the ids the sandbox sees (0..), shifted
// into a sandbox's range where it runs: by idmapped mounts for volumes and
// lower layers, and by Capture and Restore for its upper layer.
//
// maxIDRanges bounds the ranges: IDMapHost + maxIDRanges*IDMapSize stays
// below 2^31, the largest id every file system and tool takes.
const maxIDRanges = (1<<31 - IDMapHost) / IDMapSize

// idBaseOf returns the host id that sandbox id 0 is in range k.
func idBaseOf(k int) uint32 { return uint32(IDMapHost + k*IDMapSize) }

// takeIDBase returns the base of the lowest range that no sandbox in s
// holds while it may still run (not final, or its processes not yet
// reaped). s.mu is held.
func (s *Server) takeIDBase() (uint32, error) {
	held := map[uint32]bool{}
	for _, o := range s.sandboxes {
		o.mu.Lock()
		if o.rec.IDBase != 0 && (!o.rec.Status.State.Final() || o.proc != nil) {
			held[o.rec.IDBase] = true
		}
		o.mu.Unlock()
	}
	for k := range maxIDRanges {
		if b := idBaseOf(k); !held[b] {
			return b, nil
		}
	}
	return 0, fmt.Errorf("%w: every one of the %d host id ranges is held", ErrConflict, maxIDRanges)
}

// idBase is the sandbox's range: a record written before ranges were per
// sandbox ran in the one shared range, at IDMapHost.
func (r *record) idBase() uint32 {
	if r.IDBase == 0 {
		return IDMapHost
	}
	return r.IDBase
}

// idRange is the range rec's files are owned by on the host, for its
// snapshots: none without isolation, where they are host files.
func (ss *snapStore) idRange(rec *record) snapshots.IDRange {
	if ss.s.cfg.NoIsolation {
		return snapshots.IDRange{}
	}
	return snapshots.IDRange{Base: int(rec.idBase()), Size: IDMapSize}
}
