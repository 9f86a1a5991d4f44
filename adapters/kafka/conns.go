package twicekafka

import (
	"context"
	"net"
	"sync"
)

// connSet is a worker's connections to the cluster, whichever client
// dials them: cut closes them all at once, as a killed process's, and
// refuses new ones.
type connSet struct {
	dial    func(ctx context.Context, network, address string) (net.Conn, error)
	refusal error // what a dial gets once the set is cut

	mu    sync.Mutex
	dead  bool
	conns []net.Conn
}

// dialContext is kafka-go's Dialer.DialFunc.
func (s *connSet) dialContext(ctx context.Context, network, address string) (net.Conn, error) {
	s.mu.Lock()
	dead := s.dead
	s.mu.Unlock()
	if dead {
		return nil, s.refusal
	}
	c, err := s.dial(ctx, network, address)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dead {
		_ = c.Close()
		return nil, s.refusal
	}
	s.conns = append(s.conns, c)
	return c, nil
}

// Dial is sarama's proxy.Dialer: dialContext, bounded by pollTimeout.
func (s *connSet) Dial(network, address string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), pollTimeout)
	defer cancel()
	return s.dialContext(ctx, network, address)
}

// cut closes every connection and refuses new ones.
func (s *connSet) cut() {
	s.mu.Lock()
	conns := s.conns
	s.conns, s.dead = nil, true
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}
