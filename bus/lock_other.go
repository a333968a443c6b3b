//go:build !unix

package bus

// storeLock is a no-op where flock(2) is not available.
type storeLock struct{}

func lockStore(string) (*storeLock, error) { return &storeLock{}, nil }

func (*storeLock) release() {}
