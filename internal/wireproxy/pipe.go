package wireproxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// pipeSize is how many bytes one direction of a pipe holds before a
// write waits for the reader: about what a unix socket's buffer holds,
// far more than a statement and its reply.
const pipeSize = 256 << 10

// newPipe returns the two ends of an in-memory, full-duplex connection
// that buffers each direction (up to pipeSize), as a socket does.
// net.Pipe buffers nothing, so its every Write waits until the other
// goroutine has read all of it: the handler's goroutine parks after each
// message it sends and the proxy's after each reply it relays, and a
// message the server sends on its own (a notification, a ParameterStatus)
// to a connection whose client is not reading holds the relay until the
// client reads, so that the connection never comes back to waiting for
// its client and its backend cannot be given back.
//
// Like a socket's, an end's Read returns what was written before the
// other end closed, then io.EOF; a Write to an end that closed fails
// with io.ErrClosedPipe. Reads, writes and deadlines on an end closed
// here fail with net.ErrClosed, and a passed deadline with
// os.ErrDeadlineExceeded (each wrapped in a *net.OpError, as net.Pipe
// wraps them).
func newPipe() (net.Conn, net.Conn) {
	ab, ba := newPipeBuffer(), newPipeBuffer()
	a := &pipeEnd{in: ba, out: ab, closed: make(chan struct{}), rdl: newPipeDeadline(), wdl: newPipeDeadline()}
	b := &pipeEnd{in: ab, out: ba, closed: make(chan struct{}), rdl: newPipeDeadline(), wdl: newPipeDeadline()}
	return a, b
}

// pipeBuffer is one direction of a pipe.
type pipeBuffer struct {
	mu   sync.Mutex
	buf  []byte // unread bytes are buf[off:]
	off  int
	eof  bool // the writing end closed
	gone bool // the reading end closed
	// readable and writable (capacity 1) wake a reader waiting for
	// bytes or the end of the stream, and a writer waiting for room. A
	// waiter checks again after it wakes, so a stale wake-up is harmless.
	readable, writable chan struct{}
}

func newPipeBuffer() *pipeBuffer {
	return &pipeBuffer{readable: make(chan struct{}, 1), writable: make(chan struct{}, 1)}
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

// pipeEnd is one end of a pipe: it reads in and writes out.
type pipeEnd struct {
	in, out   *pipeBuffer
	wmu       sync.Mutex // a Write is not interleaved with another
	closeOnce sync.Once
	closed    chan struct{}
	rdl, wdl  *pipeDeadline
}

func (e *pipeEnd) Read(b []byte) (int, error) {
	n, err := e.read(b)
	if err != nil && !errors.Is(err, io.EOF) {
		err = &net.OpError{Op: "read", Net: "pipe", Err: err}
	}
	return n, err
}

func (e *pipeEnd) read(b []byte) (int, error) {
	for {
		switch {
		case isClosed(e.closed):
			return 0, net.ErrClosed
		case isClosed(e.rdl.wait()):
			return 0, os.ErrDeadlineExceeded
		}
		in := e.in
		in.mu.Lock()
		if unread := len(in.buf) - in.off; unread > 0 {
			n := copy(b, in.buf[in.off:])
			in.off += n
			if in.off == len(in.buf) {
				in.buf, in.off = in.buf[:0], 0
				if cap(in.buf) > 64<<10 {
					in.buf = nil // after a large reply or COPY chunk
				}
			}
			more := in.off < len(in.buf)
			in.mu.Unlock()
			wake(in.writable)
			if more {
				wake(in.readable) // for another reader of this end
			}
			return n, nil
		}
		if in.eof {
			in.mu.Unlock()
			return 0, io.EOF
		}
		in.mu.Unlock()
		if len(b) == 0 {
			return 0, nil
		}
		select {
		case <-in.readable:
		case <-e.closed:
		case <-e.rdl.wait():
		}
	}
}

func (e *pipeEnd) Write(b []byte) (int, error) {
	n, err := e.write(b)
	if err != nil {
		err = &net.OpError{Op: "write", Net: "pipe", Err: err}
	}
	return n, err
}

func (e *pipeEnd) write(b []byte) (int, error) {
	e.wmu.Lock()
	defer e.wmu.Unlock()
	out := e.out
	n := 0
	for {
		switch {
		case isClosed(e.closed):
			return n, net.ErrClosed
		case isClosed(e.wdl.wait()):
			return n, os.ErrDeadlineExceeded
		}
		out.mu.Lock()
		if out.gone {
			out.mu.Unlock()
			return n, io.ErrClosedPipe
		}
		if out.off > 0 && len(out.buf)+len(b)-n > cap(out.buf) {
			// Move the unread bytes to the front rather than grow.
			out.buf = out.buf[:copy(out.buf, out.buf[out.off:])]
			out.off = 0
		}
		room := pipeSize - (len(out.buf) - out.off)
		k := min(room, len(b)-n)
		out.buf = append(out.buf, b[n:n+k]...)
		n += k
		out.mu.Unlock()
		if k > 0 {
			wake(out.readable)
		}
		if n == len(b) {
			return n, nil
		}
		select {
		case <-out.writable:
		case <-e.closed:
		case <-e.wdl.wait():
		}
	}
}

// Close closes this end: the other end reads what was written before,
// then io.EOF, and its writes fail.
func (e *pipeEnd) Close() error {
	e.closeOnce.Do(func() {
		close(e.closed)
		e.out.mu.Lock()
		e.out.eof = true
		e.out.mu.Unlock()
		wake(e.out.readable)
		e.in.mu.Lock()
		e.in.gone = true
		e.in.buf, e.in.off = nil, 0
		e.in.mu.Unlock()
		wake(e.in.writable)
	})
	return nil
}

// buffered is how many bytes written to e wait for e's reader.
func (e *pipeEnd) buffered() int {
	e.in.mu.Lock()
	defer e.in.mu.Unlock()
	return len(e.in.buf) - e.in.off
}

func (e *pipeEnd) LocalAddr() net.Addr  { return pipeAddr{} }
func (e *pipeEnd) RemoteAddr() net.Addr { return pipeAddr{} }

func (e *pipeEnd) SetDeadline(t time.Time) error {
	if isClosed(e.closed) {
		return &net.OpError{Op: "set", Net: "pipe", Err: net.ErrClosed}
	}
	e.rdl.set(t)
	e.wdl.set(t)
	return nil
}

func (e *pipeEnd) SetReadDeadline(t time.Time) error {
	if isClosed(e.closed) {
		return &net.OpError{Op: "set", Net: "pipe", Err: net.ErrClosed}
	}
	e.rdl.set(t)
	return nil
}

func (e *pipeEnd) SetWriteDeadline(t time.Time) error {
	if isClosed(e.closed) {
		return &net.OpError{Op: "set", Net: "pipe", Err: net.ErrClosed}
	}
	e.wdl.set(t)
	return nil
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

// pipeDeadline is a deadline as a channel that is closed once it has
// passed, which a blocked Read or Write selects on.
type pipeDeadline struct {
	mu     sync.Mutex
	timer  *time.Timer
	passed chan struct{}
}

func newPipeDeadline() *pipeDeadline {
	return &pipeDeadline{passed: make(chan struct{})}
}

// set moves the deadline to t; the zero t means none.
func (d *pipeDeadline) set(t time.Time) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.timer != nil && !d.timer.Stop() {
		<-d.passed // the timer fired: wait until it closed the channel
	}
	d.timer = nil
	if isClosed(d.passed) {
		d.passed = make(chan struct{})
	}
	if t.IsZero() {
		return
	}
	wait := time.Until(t)
	if wait <= 0 {
		close(d.passed)
		return
	}
	passed := d.passed
	d.timer = time.AfterFunc(wait, func() { close(passed) })
}

func (d *pipeDeadline) wait() chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.passed
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
