package wireproxy

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgproto3"
)

// Which statements are commit points is learned from the server, not only
// from their text: a SELECT of a plpgsql function that inserts, a write
// made by a trigger or a rule, EXPLAIN ANALYZE of an UPDATE all write,
// and their text says SELECT. PostgreSQL assigns a transaction ID (xid) to
// a transaction when it first writes (a row inserted, updated, deleted or
// locked, a catalog change, a large object) and not before, so a statement
// outside a transaction block wrote when its implicit transaction has an
// xid before it commits. The proxy asks in that transaction: it appends
// one statement to the client's (in the same round trip, before the Sync
// or in the same query string),
//
//	SELECT pg_catalog.pg_current_xact_id_if_assigned() AS twice_commit_probe
//
// and takes its reply out of the stream before the client sees it. The
// question is per transaction, so other sessions and other databases on
// the server cannot answer it. It costs no round trip; it is asked only
// where needsProbe says the text cannot tell, and only of servers that
// have the function (PostgreSQL 13 and later).
const (
	probeColumn = "twice_commit_probe"
	probeSQL    = "SELECT pg_catalog.pg_current_xact_id_if_assigned() AS " + probeColumn
	// probeName names the probe's prepared statement and portal; the Close
	// at the end drops both, so the client's names are never touched.
	probeName = "twice_commit_probe"
)

// probeSuffix ends a simple query string with the probe. It holds no
// quote, dollar sign or comment end, so it cannot close a literal or a
// comment the client left open: a query that was broken stays broken.
const probeSuffix = "\n;" + probeSQL

// probeMessages are the extended-protocol messages that ask the question,
// sent just before the client's Sync. Their replies are ParseComplete,
// BindComplete, the RowDescription of probeColumn, one DataRow,
// CommandComplete and CloseComplete; after an error in the client's part
// the server skips them all.
var probeMessages = func() []byte {
	var b []byte
	b, _ = (&pgproto3.Parse{Name: probeName, Query: probeSQL}).Encode(b)
	b, _ = (&pgproto3.Bind{DestinationPortal: probeName, PreparedStatement: probeName}).Encode(b)
	b, _ = (&pgproto3.Describe{ObjectType: 'P', Name: probeName}).Encode(b)
	b, _ = (&pgproto3.Execute{Portal: probeName}).Encode(b)
	b, _ = (&pgproto3.Close{ObjectType: 'S', Name: probeName}).Encode(b)
	return b
}()

// probeKind says how a step's question was asked, and so which of its
// replies are the probe's.
type probeKind byte

const (
	noProbe       probeKind = iota
	probeSimple             // appended to a simple query string
	probeExtended           // extended-protocol messages before the Sync
)

// isProbeRow reports whether a RowDescription's body describes the probe's
// one column.
func isProbeRow(body []byte) bool {
	if len(body) < 2 || binary.BigEndian.Uint16(body) != 1 {
		return false
	}
	name, _ := cString(body[2:])
	return string(name) == probeColumn
}

// probeAssigned reports whether the probe's DataRow holds an xid rather
// than NULL.
func probeAssigned(body []byte) bool {
	return len(body) >= 6 && binary.BigEndian.Uint16(body) == 1 && int32(binary.BigEndian.Uint32(body[2:])) >= 0
}

// canProbe reports whether a server of this version (the server_version
// parameter, "15.8 (Debian 15.8-1)") has pg_current_xact_id_if_assigned.
func canProbe(version string) bool {
	version = strings.TrimSpace(version)
	digits := strings.IndexFunc(version, func(r rune) bool { return r < '0' || r > '9' })
	if digits < 0 {
		digits = len(version)
	}
	major, err := strconv.Atoi(version[:digits])
	return err == nil && major >= 13
}
