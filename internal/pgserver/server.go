// Package pgserver provides the one real PostgreSQL server a test binary
// shares: from TWICE_DATABASE_URL, from local server binaries, or from
// Docker through testcontainers-go.
//
// # Ways to a server
//
// TWICE_POSTGRES=url|local|docker forces one way; unset, they are tried in
// that order (url only when TWICE_DATABASE_URL is set):
//
//   - url: an existing server. Its user must be allowed to CREATE DATABASE.
//   - local: initdb and postgres found on PATH or under
//     /usr/lib/postgresql/*/bin (highest version). A throwaway cluster on
//     tmpfs, unix socket only, tuned for tests. The initdb result is cached
//     under the user cache dir, so later runs only copy it.
//   - docker: testcontainers-go's postgres module with the image of
//     TWICE_POSTGRES_IMAGE (default postgres:16-alpine). The image must be
//     on the machine or pullable. testcontainers-go runs in a helper,
//     cmd/twice-pgdocker, built on first use (TWICE_PGDOCKER names a
//     prebuilt one), so no test binary links it; see docker.go.
//
// # Lifetime
//
// A server this package starts is stopped when the test binary exits, for
// any reason, SIGKILL included: a watchdog process (see watchdog.go) waits
// for the end of a pipe only the test process holds, then stops postgres or
// removes the container and deletes the cluster's directory. Whatever a
// killed watchdog left behind is removed by the next run, judged by whether
// the process that made it is still alive.
//
// A ModeURL server is not this package's to stop, but the databases a run
// made on it must not outlive the run either: DropOnExit hands a watchdog
// the run's name prefix, and when the process exits the watchdog drops the
// databases with that prefix, a name a run generates and the run's marker
// comment (RunMarker), and nothing else.
//
// # Dumps
//
// A database on a server that dies with the test binary can be kept as a
// file: Dump writes it as plain SQL. In a container the container's own
// pg_dump makes it (through the Docker API), so it matches the server's
// version whatever the host has installed.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/runtwice/twice/internal/blame"
)

// Modes, as TWICE_POSTGRES spells them.
const (
	ModeURL    = "url"
	ModeLocal  = "local"
	ModeDocker = "docker"
)

// DefaultImage is the Docker image used when TWICE_POSTGRES_IMAGE is unset.
const DefaultImage = "postgres:16-alpine"

// Server is a running PostgreSQL server on which the harness creates its
// own databases. It is safe for concurrent use.
type Server struct {
	mode    string
	base    string // connection string of the maintenance database
	version int    // server_version_num

	local     *localCluster // ModeLocal only
	container string        // ModeDocker only: the container's ID
	image     string        // ModeDocker only: the container's image
	ctr       execer        // ModeDocker only: runs pg_dump in the container

	closeOnce sync.Once
	closeErr  error
	stop      func() error

	dropMu       sync.Mutex
	dropWD       *watchdog       // ModeURL: started by the first DropOnExit
	dropPrefixes map[string]bool // prefixes already handed to dropWD
}

// Mode reports how the server was obtained: ModeURL, ModeLocal or ModeDocker.
func (s *Server) Mode() string { return s.mode }

// Version reports the server's version as server_version_num does, e.g.
// 150018 for 15.18.
func (s *Server) Version() int { return s.version }

// ConnString returns a connection string for database on this server, with
// the credentials of a user who may create databases (a superuser for the
// local and docker modes). An empty database means the maintenance
// database the server was reached through. pgx and database/sql with
// pgx's stdlib driver accept it.
func (s *Server) ConnString(database string) string {
	if database == "" {
		return s.base
	}
	cs, err := withDatabase(s.base, database)
	if err != nil {
		// base was parsed when the server was reached; this cannot happen.
		return s.base
	}
	return cs
}

// Close stops a server this process started and removes what it left on
// disk; for ModeURL it does nothing (databases given to DropOnExit are
// dropped when the process exits, not here). It is safe to call more than
// once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		if s.stop != nil {
			s.closeErr = s.stop()
		}
	})
	return s.closeErr
}

var shared struct {
	mu  sync.Mutex
	srv *Server
	err error
}

// Shared returns the server shared by every test in this binary, starting
// it on first use as ConfigFromEnv says. It is stopped when the process
// exits. A failure is remembered: later calls return the same error
// instead of trying again.
func Shared(ctx context.Context) (*Server, error) {
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if shared.srv == nil && shared.err == nil {
		shared.srv, shared.err = Start(ctx, ConfigFromEnv())
	}
	return shared.srv, shared.err
}

// Config chooses how to get a server. The zero value tries every way in
// order, with the default image.
type Config struct {
	Mode  string // "", ModeURL, ModeLocal or ModeDocker (TWICE_POSTGRES)
	URL   string // the existing server for ModeURL (TWICE_DATABASE_URL)
	Image string // Docker image for ModeDocker; "" means DefaultImage (TWICE_POSTGRES_IMAGE)
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

// unavailableError says a way is not present on this machine (no
// binaries, no Docker engine), as opposed to one that is present and
// failed; only then does Start try the next way.
type unavailableError struct{ what string }

func (e *unavailableError) Error() string { return e.what }

func unavailable(format string, args ...any) error {
	return &unavailableError{fmt.Sprintf(format, args...)}
}

func isUnavailable(err error) bool {
	var u *unavailableError
	return errors.As(err, &u)
}

// Start obtains a server as cfg says. The caller owns it and must Close it;
// tests normally use Shared instead.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	switch cfg.Mode {
	case ModeURL:
		if cfg.URL == "" {
			return nil, blame.Configf("TWICE_POSTGRES=url but TWICE_DATABASE_URL is empty: set it to a server whose user may create databases, e.g. postgres://postgres:secret@localhost:5432/postgres")
		}
		return startURL(ctx, cfg.URL)
	case ModeLocal:
		srv, err := startLocal(ctx)
		if isUnavailable(err) {
			return nil, blame.Configf("TWICE_POSTGRES=local but %w: install PostgreSQL's server package (e.g. apt-get install postgresql)", err)
		}
		return srv, err
	case ModeDocker:
		srv, err := startDocker(ctx, cfg.Image)
		if isUnavailable(err) {
			return nil, blame.Configf("TWICE_POSTGRES=docker but %w: start Docker, or point DOCKER_HOST at an engine", err)
		}
		return srv, err
	case "":
	default:
		return nil, blame.Configf("TWICE_POSTGRES=%q is not a way to get PostgreSQL: use url, local or docker, or leave it unset to try them in that order", cfg.Mode)
	}

	if cfg.URL != "" {
		return startURL(ctx, cfg.URL)
	}
	srv, localErr := startLocal(ctx)
	if !isUnavailable(localErr) {
		return srv, localErr
	}
	srv, dockerErr := startDocker(ctx, cfg.Image)
	if dockerErr != nil && !isUnavailable(dockerErr) && ctx.Err() == nil {
		// Docker was the fallback: its failure alone would not say that
		// the local binaries were looked for first, nor where.
		return nil, blame.Configf("no PostgreSQL server binaries here (%w), so twice tried Docker, and it failed: %s. Install PostgreSQL's server package (e.g. apt-get install postgresql), fix what Docker says, or set TWICE_DATABASE_URL to a server of yours",
			localErr, dockerErr.Error())
	}
	if !isUnavailable(dockerErr) {
		return srv, dockerErr
	}
	return nil, blame.Configf(`no PostgreSQL server: twice needs one of
  1. TWICE_DATABASE_URL=postgres://user:password@host:5432/postgres, an existing server whose user may create databases (unset now);
  2. PostgreSQL server binaries, initdb and postgres, on PATH or under /usr/lib/postgresql/*/bin, e.g. apt-get install postgresql (%w);
  3. a Docker engine (DOCKER_HOST or /var/run/docker.sock) with the image of TWICE_POSTGRES_IMAGE (default %s) on the machine or pullable (%w).
Set TWICE_POSTGRES=url, local or docker to insist on one way and see its own error`, localErr, DefaultImage, dockerErr)
}
