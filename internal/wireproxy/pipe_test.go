package wireproxy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

// The proxy's in-memory pipe behaves as a net.Conn must: x/net's
// conformance suite (ping-pong, racy reads and writes, past, present and
// future deadlines, Close during blocked calls, concurrent methods).
func TestPipeConn(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		c1, c2 = newPipe()
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

// What the proxy and its clients rely on beyond the suite: an end reads
// what the other wrote before it closed, then io.EOF; a write larger than
// the buffer goes through whole once the reader reads; the ends of a
// closed end fail with net.ErrClosed, writes to it with
// io.ErrClosedPipe, and a passed deadline with os.ErrDeadlineExceeded.
func TestPipeSemantics(t *testing.T) {
	t.Run("data then EOF", func(t *testing.T) {
		a, b := newPipe()
		defer b.Close()
		if _, err := a.Write([]byte("last words")); err != nil {
			t.Fatal(err)
		}
		a.Close()
		got, err := io.ReadAll(b)
		if string(got) != "last words" || err != nil {
			t.Errorf("reading after the writer closed = %q, %v; want \"last words\", nil (then io.EOF)", got, err)
		}
		// io.EOF itself, as io.Reader promises: callers compare with ==.
		if _, err := b.Read(make([]byte, 1)); err != io.EOF { //nolint:errorlint // the io.Reader contract is io.EOF unwrapped
			t.Errorf("Read after the end of the stream: err = %v, want io.EOF", err)
		}
		if _, err := b.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("Write to a closed end: err = %v, want io.ErrClosedPipe", err)
		}
	})
	t.Run("larger than the buffer", func(t *testing.T) {
		a, b := newPipe()
		defer a.Close()
		defer b.Close()
		want := bytes.Repeat([]byte("0123456789abcdef"), 3*pipeSize/16+5)
		done := make(chan error, 1)
		go func() { _, err := a.Write(want); a.Close(); done <- err }()
		got, err := io.ReadAll(b)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("read %d bytes (%v), want the %d written", len(got), err, len(want))
		}
		if err := <-done; err != nil {
			t.Errorf("Write: %v", err)
		}
	})
	t.Run("closed here", func(t *testing.T) {
		a, b := newPipe()
		defer b.Close()
		if _, err := b.Write([]byte("unread")); err != nil {
			t.Fatal(err)
		}
		a.Close()
		if _, err := a.Read(make([]byte, 8)); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Read on a closed end: err = %v, want net.ErrClosed", err)
		}
		if _, err := a.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
			t.Errorf("Write on a closed end: err = %v, want net.ErrClosed", err)
		}
		if err := a.SetReadDeadline(time.Time{}); !errors.Is(err, net.ErrClosed) {
			t.Errorf("SetReadDeadline on a closed end: err = %v, want net.ErrClosed", err)
		}
		if err := a.Close(); err != nil {
			t.Errorf("a second Close: %v", err)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		a, b := newPipe()
		defer a.Close()
		defer b.Close()
		if _, err := b.Write([]byte("waiting")); err != nil {
			t.Fatal(err)
		}
		a.SetReadDeadline(time.Now())
		if _, err := a.Read(make([]byte, 8)); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("Read past its deadline: err = %v, want os.ErrDeadlineExceeded", err)
		}
		a.SetReadDeadline(time.Time{})
		buf := make([]byte, 8)
		if n, err := a.Read(buf); string(buf[:n]) != "waiting" || err != nil {
			t.Errorf("Read once the deadline is lifted = %q, %v; want \"waiting\"", buf[:n], err)
		}
	})
}
