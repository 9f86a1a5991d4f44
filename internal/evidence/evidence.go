// Package evidence names the evidence a failed check leaves behind: databases
// renamed twice_kept_<run ID>_<n> on a server that outlives the test
// (TWICE_DATABASE_URL), and, for a server that dies with the test binary
// (the local cluster, a Docker container), plain SQL dumps of them in Dir.
// Both the harness, which makes them, and twice kept, which lists and drops
// them, use it; it imports nothing of either.
package evidence

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
)

// name matches exactly the names freshdb gives kept databases.
var name = regexp.MustCompile(`^twice_kept_[0-9a-f]{8}_[0-9]+$`)

// IsName reports whether s is the name of a kept database (or a dump
// file's base name without .sql). Nothing else is ever listed or dropped.
func IsName(s string) bool { return name.MatchString(s) }

// LikePattern is the LIKE pattern that preselects kept databases in
// pg_database; IsName has the last word.
const LikePattern = `twice\_kept\_%`

// Dir is where dumps of kept databases go: a directory of this user's in
// the temporary directory. Not the package's testdata: a dump holds the
// test's data and does not belong in the source tree, and one place lets
// twice kept find every package's dumps. The files last until removed
// (twice kept -drop) or until the temporary directory is cleared.
func Dir() string {
	return filepath.Join(os.TempDir(), fmt.Sprintf("twice-kept-%d", os.Geteuid()))
}

// RunOf is the run ID in a kept database's name: "89abcdef" for
// twice_kept_89abcdef_3, or "" for a name that is not a kept database's.
func RunOf(db string) string {
	if !IsName(db) {
		return ""
	}
	return db[len("twice_kept_") : len("twice_kept_")+8]
}

// DumpFile is the dump file of the kept database db, in the directory of
// its run: Dir()/<run ID>/<db>.sql, so one run's evidence is listed and
// removed without touching another's.
func DumpFile(db string) string { return filepath.Join(Dir(), RunOf(db), db+".sql") }

// RestoreCommand is the shell command that restores the dump of db into a
// new database of the same name on the server psql and createdb reach
// (PGHOST, PGUSER... or their defaults).
func RestoreCommand(db string) string {
	return fmt.Sprintf("createdb %s && psql -q -v ON_ERROR_STOP=1 -d %s -f '%s'", db, db, DumpFile(db))
}
