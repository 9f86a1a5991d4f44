package twicenats

import (
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// embedded is the one nats-server of the test binary, with JetStream on,
// started on first use and shared by every scenario (each has its own
// stream). Clients reach it in process (nats.InProcessServer): no port is
// opened, not even on loopback.
var embedded struct {
	once sync.Once
	nc   *nats.Conn
	err  error
}

// serverStart bounds how long the embedded server may take to be ready.
const serverStart = 30 * time.Second

// connection is the test binary's client connection to the embedded
// server, the real nats.go client every queue operation goes through.
func connection() (*nats.Conn, error) {
	embedded.once.Do(func() { embedded.nc, embedded.err = start() })
	return embedded.nc, embedded.err
}

func start() (*nats.Conn, error) {
	dir, err := os.MkdirTemp("", "twicenats-")
	if err != nil {
		return nil, fmt.Errorf("twicenats: a directory for the embedded nats-server's JetStream store: %w", err)
	}
	s, err := server.NewServer(&server.Options{
		ServerName: "twice",
		DontListen: true, // in-process clients only
		JetStream:  true,
		StoreDir:   dir,
		NoLog:      true,
		NoSigs:     true,
	})
	if err != nil {
		return nil, fmt.Errorf("twicenats: configuring the embedded nats-server: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(serverStart) {
		s.Shutdown()
		return nil, fmt.Errorf("twicenats: the embedded nats-server was not ready within %v", serverStart)
	}
	nc, err := nats.Connect("", nats.InProcessServer(s), nats.Name("twice"))
	if err != nil {
		s.Shutdown()
		return nil, fmt.Errorf("twicenats: connecting to the embedded nats-server in process: %w", err)
	}
	return nc, nil
}
