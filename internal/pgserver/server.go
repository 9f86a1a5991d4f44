// Package pgserver provides the one real PostgreSQL server a test binary
// shares: from TWICE_DATABASE_URL, from local server binaries, or from
// Docker through testcontainers-go.
package pgserver

import (
	"context"
	"fmt"
	"os"
	"sync"

	"github.com/jackc/pgx/v5/pgconn"
)

// Modes, as TWICE_POSTGRES spells them.
const (
	ModeURL    = "url"
	ModeLocal  = "local"
	ModeDocker = "docker"
)

// Server is a running PostgreSQL server on which the harness creates its
// own databases. It is safe for concurrent use.
type Server struct {
	mode  string
	admin *pgconn.Config // connection to the maintenance database
	base  string         // connection string of the maintenance database
	stop  func() error
}

// Mode reports how the server was obtained: ModeURL, ModeLocal or ModeDocker.
func (s *Server) Mode() string { return s.mode }

// ConnString returns a connection string for database on this server, with
// the harness's credentials.
func (s *Server) ConnString(database string) string {
	return withDatabase(s.base, database)
}

// Close stops a server this process started; for ModeURL it does nothing.
func (s *Server) Close() error {
	if s.stop == nil {
		return nil
	}
	return s.stop()
}

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

// Shared returns the server shared by every test in this binary, starting
// it on first use. It is stopped when the process exits.
func Shared(ctx context.Context) (*Server, error) {
	shared.once.Do(func() {
		shared.srv, shared.err = Start(ctx, ConfigFromEnv())
	})
	return shared.srv, shared.err
}

// Config chooses how to get a server. The zero value tries every way in
// order.
type Config struct {
	Mode  string // "", ModeURL, ModeLocal or ModeDocker
	URL   string // TWICE_DATABASE_URL
	Image string // TWICE_POSTGRES_IMAGE
}

// ConfigFromEnv reads TWICE_POSTGRES, TWICE_DATABASE_URL and
// TWICE_POSTGRES_IMAGE.
func ConfigFromEnv() Config {
	return Config{
		Mode:  os.Getenv("TWICE_POSTGRES"),
		URL:   os.Getenv("TWICE_DATABASE_URL"),
		Image: os.Getenv("TWICE_POSTGRES_IMAGE"),
	}
}

// Start obtains a server as cfg says.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.URL != "" && (cfg.Mode == "" || cfg.Mode == ModeURL) {
		return fromURL(ctx, cfg.URL)
	}
	return nil, fmt.Errorf("[twice] internal: no PostgreSQL: set TWICE_DATABASE_URL (only URL mode is built so far)")
}

func fromURL(ctx context.Context, url string) (*Server, error) {
	cfg, err := pgconn.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("[twice] internal: TWICE_DATABASE_URL: %w", err)
	}
	return &Server{mode: ModeURL, admin: cfg, base: url}, nil
}

// withDatabase replaces the database of a connection string, keeping the
// rest as it was.
func withDatabase(connString, database string) string {
	// placeholder: URL form only
	u := connString
	cfg, err := pgconn.ParseConfig(u)
	if err != nil {
		return u
	}
	return fmt.Sprintf("host=%s port=%d user=%s password=%s dbname=%s sslmode=disable", cfg.Host, cfg.Port, cfg.User, cfg.Password, database)
}
