package freshdb

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"

	"github.com/runtwice/twice/internal/pgserver"
)

// Every database this package creates is named twice_<run ID>_<suffix>,
// where the run ID is 8 lowercase hex digits drawn once per process. Kept
// databases are renamed to twice_kept_<run ID>_<n>, which the pattern below
// does not match, so no cleanup ever drops them.
const namePrefix = "twice_"

// ownName matches exactly the names this package generates for live work.
// Nothing outside it is ever created, changed or dropped.
var ownName = regexp.MustCompile(`^twice_([0-9a-f]{8})_([a-z0-9]{1,40})$`)

// runMarker is the comment (COMMENT ON DATABASE) every database a run
// creates carries from its creation on: the stale sweep and the exit
// watchdog of a URL server drop only databases whose comment names the
// run their name does, so a foreign database that merely looks like ours
// (twice_deadbeef_d1) survives.
func runMarker(id string) string { return pgserver.RunMarker(id) }

// lockClass is the first key of the session-level advisory lock each run
// holds on its lock connection ("twic"); the second key is the run ID.
const lockClass = 0x74776963

var runID = newRunID()

func newRunID() string {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		// crypto/rand does not fail on supported platforms; a fixed ID would
		// still be safe (creation would collide, not overwrite).
		return "00000000"
	}
	return fmt.Sprintf("%08x", binary.BigEndian.Uint32(b[:]))
}

// RunID is this process's run ID: 8 lowercase hex digits.
func RunID() string { return runID }

// RunPrefix is the prefix of every database name this process creates and
// may still drop: "twice_<run ID>_". Once this process is gone, every database
// on the server whose name starts with it (as a literal prefix, e.g.
// datname LIKE 'twice\_<run ID>\_%') and whose comment is this run's
// marker (pgserver.RunMarker) is garbage; kept databases do not start with
// it, and a database of that name without the marker is someone else's.
func RunPrefix() string { return namePrefix + runID + "_" }

// runKey is the advisory-lock key of a run ID (as pg_locks.objid shows it).
func runKey(id string) (uint32, bool) {
	v, err := strconv.ParseUint(id, 16, 32)
	return uint32(v), err == nil && len(id) == 8
}

func keptName(n uint64) string {
	return fmt.Sprintf("%skept_%s_%d", namePrefix, runID, n)
}
