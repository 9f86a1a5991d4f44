package freshdb

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/internal/blame"
)

// templateInUse reports whether err is the server refusing to copy a template
// another session is connected to (SQLSTATE 55006, "source database ...
// is being accessed by other users").
func templateInUse(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55006"
}

// inUseError says why the template cannot be copied: every session the
// setup steps left was ended when they finished, so one connected since
// belongs to a connection pool the setup made and kept (in a package
// variable, say), which reconnects on its own. That is the user's code,
// not twice's; the sessions are named as the server lists them.
func (t *Template) inUseError(ctx context.Context, err error) error {
	sessions := "the server did not say which"
	rows, qerr := t.r.admin.Query(ctx, `SELECT format('pid %s (%s%s)', pid, coalesce(nullif(application_name, ''), 'no application_name'), coalesce(', ' || state, '')) FROM pg_stat_activity WHERE datname = $1 ORDER BY pid`, t.Name)
	if qerr == nil {
		var got []string
		for rows.Next() {
			var s string
			if rows.Scan(&s) == nil {
				got = append(got, s)
			}
		}
		rows.Close()
		if len(got) > 0 {
			sessions = strings.Join(got, ", ")
		}
	}
	return blame.User(fmt.Errorf("the template database %s has sessions connected to it (%s) after its setup steps ended, so no scenario's database can be copied from it: a connection pool the setup opened and kept (in a package variable, say) reconnects on its own. In a FuncDB setup use db.Pool(ctx) or db.SQL(), which the harness closes when the func returns, or close the pool you opened before returning: %w", t.Name, sessions, err))
}
