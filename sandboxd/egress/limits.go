package egress

import (
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"
)

// capListener holds at most cap(sem) of its connections open at once. Past
// that, Accept closes each new connection as soon as the kernel hands it over
// and waits for the next, so an over-cap connection never reaches the HTTP
// server and costs it no goroutine or buffer. A connection counts from Accept
// until it is closed: idle, reading headers, serving, or hijacked for a tunnel.
type capListener struct {
	net.Listener
	sem     chan struct{} // a token per open connection; shared by a Proxy's listeners
	m       *proxyMetrics
	refused *sampledLog
}

func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		select {
		case l.sem <- struct{}{}:
			l.m.conns.Inc()
			return &capConn{Conn: c, release: sync.OnceFunc(func() {
				<-l.sem
				l.m.conns.Dec()
			})}, nil
		default:
			c.Close()
			l.m.refused.Inc()
			l.refused.log("egress proxy connection refused: the sandbox has too many open", "max", cap(l.sem))
		}
	}
}

// capConn gives its listener's token back when it is first closed.
type capConn struct {
	net.Conn
	release func()
}

func (c *capConn) Close() error {
	err := c.Conn.Close()
	c.release()
	return err
}

// CloseWrite half-closes a TCP connection (tunnels use it), else closes.
func (c *capConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// Rate of the log lines of a sampledLog: a burst, then one a second. What it
// drops is summed up in one line at most every sampledSummaryEvery, and when
// the proxy closes.
const (
	sampledBurst        = 10
	sampledEvery        = time.Second
	sampledSummaryEvery = 10 * time.Second
)

// sampledLog writes one kind of log line of a sandbox through a token bucket
// (sampledBurst lines, then one per sampledEvery) and says later how many it
// dropped: "N more" in a summary line. A sandbox that provokes the line in a
// loop thus adds a few hundred bytes a second to the server's log, whatever
// its rate. Safe for concurrent use.
type sampledLog struct {
	logger *slog.Logger
	msg    string
	now    func() time.Time

	wg sync.WaitGroup // the summary timer's function
	// mu guards the fields below.
	mu      sync.Mutex
	tokens  float64
	last    time.Time
	dropped int64
	timer   *time.Timer // armed while dropped > 0
	closed  bool
}

func newSampledLog(logger *slog.Logger, msg string) *sampledLog {
	return &sampledLog{logger: logger, msg: msg, now: time.Now, tokens: sampledBurst}
}

// log writes a line with msg and args, or counts it as dropped.
func (s *sampledLog) log(msg string, args ...any) {
	s.mu.Lock()
	if s.closed || !s.take() {
		if !s.closed {
			s.dropped++
			s.arm()
		}
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	s.logger.Info(msg, args...)
}

// take takes a token if there is one. Call with mu held.
func (s *sampledLog) take() bool {
	now := s.now()
	if !s.last.IsZero() {
		s.tokens = min(sampledBurst, s.tokens+float64(now.Sub(s.last))/float64(sampledEvery))
	}
	s.last = now
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

// arm starts the summary timer unless it runs. Call with mu held.
func (s *sampledLog) arm() {
	if s.timer != nil {
		return
	}
	s.wg.Add(1)
	s.timer = time.AfterFunc(sampledSummaryEvery, func() {
		defer s.wg.Done()
		s.mu.Lock()
		n := s.dropped
		s.dropped, s.timer = 0, nil
		s.mu.Unlock()
		s.summary(n)
	})
}

func (s *sampledLog) summary(n int64) {
	if n > 0 {
		s.logger.Info(fmt.Sprintf("%s: %d more not logged", s.msg, n), "more", n)
	}
}

// close writes the summary of what is still dropped and stops logging.
func (s *sampledLog) close() {
	s.mu.Lock()
	s.closed = true
	n := s.dropped
	s.dropped = 0
	if s.timer != nil && s.timer.Stop() {
		s.wg.Done() // its function will not run
	}
	s.timer = nil
	s.mu.Unlock()
	s.wg.Wait()
	s.summary(n)
}

// maxLoggedHost is the longest host name a log line carries whole: the
// longest DNS name. A longer one (a request may name anything) is cut there.
const maxLoggedHost = 253

// logHost returns host as a log line carries it: cut to maxLoggedHost bytes
// with a marker saying how long it was.
func logHost(host string) string {
	if len(host) <= maxLoggedHost {
		return host
	}
	return fmt.Sprintf("%s...[truncated, %d bytes]", host[:maxLoggedHost], len(host))
}
