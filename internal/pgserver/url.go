package pgserver

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/redact"
)

// urlTimeout bounds reaching a TWICE_DATABASE_URL server: a wrong host or
// a firewall must fail the test quickly, never hang it.
const urlTimeout = 10 * time.Second

func startURL(ctx context.Context, connString string) (*Server, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, blame.Configf("TWICE_DATABASE_URL is not a PostgreSQL connection string (postgres://user[:password]@host[:port]/db, or host=... user=... keyword/value pairs): it is %s: %s", redact.Value("TWICE_DATABASE_URL", connString), redact.FromEnv([]string{"TWICE_DATABASE_URL=" + connString}).String(err.Error()))
	}
	where := describeHost(cfg)
	ctx, cancel := context.WithTimeout(ctx, urlTimeout)
	defer cancel()
	version, mayCreate, err := probe(ctx, cfg)
	if err != nil {
		return nil, blame.Configf("TWICE_DATABASE_URL: cannot use PostgreSQL at %s as user %q (gave up after at most %s): %w; check that the server runs there and the URL's host, port, user and password", where, cfg.User, urlTimeout, err)
	}
	if !mayCreate {
		return nil, blame.Configf("TWICE_DATABASE_URL: user %q on %s may not CREATE DATABASE, and twice makes a fresh database per scenario: run ALTER ROLE %s CREATEDB as a superuser, or use a superuser's URL", cfg.User, where, quoteIdent(cfg.User))
	}
	return &Server{mode: ModeURL, base: connString, version: version}, nil
}

// probe connects once and asks the server's version and whether the user
// may create databases.
func probe(ctx context.Context, cfg *pgconn.Config) (version int, mayCreate bool, err error) {
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return 0, false, err
	}
	defer func() { _ = conn.Close(context.Background()) }()
	res := conn.ExecParams(ctx,
		`SELECT current_setting('server_version_num')::int, rolsuper OR rolcreatedb FROM pg_roles WHERE rolname = current_user`,
		nil, nil, nil, nil).Read()
	if res.Err != nil {
		return 0, false, res.Err
	}
	if len(res.Rows) != 1 {
		return 0, false, fmt.Errorf("current_user is not in pg_roles")
	}
	if _, err := fmt.Sscan(string(res.Rows[0][0]), &version); err != nil {
		return 0, false, fmt.Errorf("server_version_num %q: %w", res.Rows[0][0], err)
	}
	return version, string(res.Rows[0][1]) == "t", nil
}

// describeHost names where cfg points, every fallback host included.
func describeHost(cfg *pgconn.Config) string {
	where := hostPort(cfg.Host, cfg.Port)
	for _, fb := range cfg.Fallbacks {
		if fb.Host != cfg.Host || fb.Port != cfg.Port {
			where += " or " + hostPort(fb.Host, fb.Port)
		}
	}
	return where
}

func hostPort(host string, port uint16) string {
	if len(host) > 0 && host[0] == '/' {
		return fmt.Sprintf("unix socket %s/.s.PGSQL.%d", host, port)
	}
	return fmt.Sprintf("%s:%d", host, port)
}

func quoteIdent(s string) string {
	out := `"`
	for _, r := range s {
		if r == '"' {
			out += `""`
		} else {
			out += string(r)
		}
	}
	return out + `"`
}
