package bus

import (
	"errors"
	"fmt"

	"github.com/alineo-labs/alineo/adapters"
)

var (
	// ErrClosed is adapters.ErrClosed: the bus or ledger was closed.
	ErrClosed = adapters.ErrClosed
	// ErrFenced is adapters.ErrFenced: another writer owns the sandbox's ledger.
	ErrFenced = adapters.ErrFenced
	// ErrHistoryTruncated is returned by reads when the stream no longer holds
	// the beginning of a sandbox's history and no LedgerConfig.Projection can
	// supply it.
	ErrHistoryTruncated = errors.New("ledger history truncated by stream retention")
	// ErrInvalidConfig reports a Config or LedgerConfig that cannot work.
	ErrInvalidConfig = errors.New("invalid bus config")
)

// FencedError says which sandbox a writer lost and at which epoch. It unwraps
// to adapters.ErrFenced.
type FencedError struct {
	SandboxID string
	// Epoch is the writer's fence sequence (0 when it never held the sandbox).
	Epoch uint64
	// Err is the server's answer, if any.
	Err error
}

func (e *FencedError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("sandbox %s: writer at epoch %d fenced: %v", e.SandboxID, e.Epoch, e.Err)
	}
	return fmt.Sprintf("sandbox %s: writer at epoch %d fenced", e.SandboxID, e.Epoch)
}

// Unwrap returns adapters.ErrFenced and the server's error.
func (e *FencedError) Unwrap() []error {
	if e.Err != nil {
		return []error{adapters.ErrFenced, e.Err}
	}
	return []error{adapters.ErrFenced}
}

// ErrStoreInUse is wrapped by the *StoreInUseError of an embedded server
// started on a store directory another server holds.
var ErrStoreInUse = errors.New("embedded NATS store in use")

// StoreInUseError says which process holds an embedded server's store
// directory and how to reach its server instead: the URL with its token is
// in URLFile (mode 0600, readable by the same user). It unwraps to
// ErrStoreInUse.
type StoreInUseError struct {
	Dir     string
	PID     int // the holder's process id; 0 when it could not be read
	URLFile string
}

func (e *StoreInUseError) Error() string {
	who := "another process"
	if e.PID > 0 {
		who = fmt.Sprintf("process %d", e.PID)
	}
	return fmt.Sprintf("embedded NATS store %s is in use by %s: connect to its server instead, with NATS_URL=$(cat %s) (or --nats)", e.Dir, who, e.URLFile)
}

// Unwrap returns ErrStoreInUse.
func (e *StoreInUseError) Unwrap() error { return ErrStoreInUse }
