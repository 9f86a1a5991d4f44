package freshdb

import "github.com/runtwice/twice/internal/pgserver"

// DisplayConnString is ConnString without its password, for everything
// that prints or stores it (logs, messages, reports): those end up in CI
// artifacts. psql given it asks for the password, or reads PGPASSWORD.
func (d *Database) DisplayConnString() string {
	return pgserver.WithoutPassword(d.ConnString)
}
