package wireproxy

import (
	"strings"

	"github.com/runtwice/twice/internal/sqllex"
)

// statement is what the proxy needs to know about one SQL statement to
// label a step: its leading keywords and whether it can change data.
type statement struct {
	keyword  string // first word, upper case
	second   string // second word, upper case
	third    string // third word, upper case
	modifies bool   // INSERT, UPDATE, DELETE or MERGE appears as a word
	copyFrom bool   // FROM appears outside parentheses (COPY ... FROM)
	sequence bool   // nextval or setval appears as a word
	// concurrently is set when CONCURRENTLY appears outside parentheses
	// (CREATE INDEX CONCURRENTLY), which cannot run in a transaction.
	concurrently bool
	// inert is set for a SELECT of constants and parameters, cast to
	// built-in types, that runs no code a user could have written: see
	// inertScan.
	inert bool
}

// splitSQL reads a query string's statements (sqllex), past comments,
// string literals, quoted identifiers and dollar-quoted bodies.
// Statements with no words (";", "-- ping") are left out, so a health
// check splits into nothing.
func splitSQL(sql string) []statement {
	var out []statement
	var cur statement
	var in inertScan
	words, depth := 0, 0
	for t := range sqllex.Tokens(sql) {
		in.token(sql, t)
		switch t.Kind {
		case sqllex.Semicolon:
			out = cur.end(out, words, in)
			cur, words, depth, in = statement{}, 0, 0, inertScan{}
		case sqllex.Punct:
			switch t.Text {
			case "(":
				depth++
			case ")":
				depth--
			}
		case sqllex.Word:
			words++
			in.word(t.Text, words)
			cur.word(t.Text, words, depth)
		}
	}
	return cur.end(out, words, in)
}

// end appends s, the statement of so many words that in scanned, to out,
// unless it has none.
func (s statement) end(out []statement, words int, in inertScan) []statement {
	if words == 0 {
		return out
	}
	s.inert = s.keyword == "SELECT" && !in.spoilt
	return append(out, s)
}

// word notes the n-th word w of s, which stands in depth parentheses.
func (s *statement) word(w string, n, depth int) {
	switch n {
	case 1:
		s.keyword = strings.ToUpper(w)
	case 2:
		s.second = strings.ToUpper(w)
	case 3:
		s.third = strings.ToUpper(w)
	}
	switch {
	case strings.EqualFold(w, "INSERT"), strings.EqualFold(w, "UPDATE"),
		strings.EqualFold(w, "DELETE"), strings.EqualFold(w, "MERGE"):
		s.modifies = true
	case depth == 0 && strings.EqualFold(w, "FROM"):
		s.copyFrom = true
	case strings.EqualFold(w, "NEXTVAL"), strings.EqualFold(w, "SETVAL"):
		s.sequence = true
	case depth == 0 && strings.EqualFold(w, "CONCURRENTLY"):
		s.concurrently = true
	}
}

// inertScan watches a statement's tokens and words for anything that
// may run code a user wrote (a function, an operator, a view or table, a
// domain's check, a user type's cast): only constants, parameters, casts
// to the built-in types of inertTypes, aliases and commas leave it
// unspoilt. "SELECT $1::int" and "SELECT 1" need no question to the
// server. It assumes pg_catalog comes first in search_path, as it does
// unless a search_path names it later.
type inertScan struct {
	spoilt bool
	cast   bool // after "::": type words follow
	alias  bool // after AS: the next word is a name
}

// token judges t, a token of sql, by its kind: words are judged whole
// (word), as are literals and parameters.
func (s *inertScan) token(sql string, t sqllex.Token) {
	switch t.Kind {
	case sqllex.QuotedIdent:
		s.spoilt = true // a quoted name may be anyone's
	case sqllex.Punct:
		s.punct(sql, t.Start)
	}
}

// punct judges the byte sql[i] that stands alone.
func (s *inertScan) punct(sql string, i int) {
	switch c := sql[i]; {
	case c == ':' && i+1 < len(sql) && sql[i+1] == ':':
		s.cast = true
	case c == ':' && i > 0 && sql[i-1] == ':':
	case c == ',':
		s.cast = false
	case c == '.', c == '$':
	default:
		s.spoilt = true // an operator, a parenthesis
	}
}

func (s *inertScan) word(w string, n int) {
	switch {
	case n == 1:
	case s.alias:
		s.alias = false
	case strings.EqualFold(w, "AS"):
		s.alias, s.cast = true, false
	case s.cast && inertTypes[strings.ToLower(w)]:
	case !s.cast && (strings.EqualFold(w, "TRUE") || strings.EqualFold(w, "FALSE") || strings.EqualFold(w, "NULL")):
	default:
		s.spoilt = true
	}
}

// inertTypes are built-in type names (and the words of multi-word ones)
// whose casts from constants run only PostgreSQL's own functions.
var inertTypes = map[string]bool{
	"int": true, "int2": true, "int4": true, "int8": true, "integer": true, "smallint": true, "bigint": true,
	"text": true, "varchar": true, "char": true, "character": true, "varying": true, "name": true,
	"bool": true, "boolean": true, "numeric": true, "decimal": true, "real": true, "float4": true, "float8": true,
	"double": true, "precision": true, "bytea": true, "uuid": true, "date": true, "time": true, "timestamp": true,
	"timestamptz": true, "with": true, "without": true, "zone": true, "interval": true, "json": true, "jsonb": true,
	"oid": true,
}

// readOnly lists statements that change no data and end no transaction:
// outside a transaction they are not commit points by their text. Those
// that can run user code (mayWrite) are asked about: see needsProbe.
var readOnly = map[string]bool{
	"SELECT": true, "SHOW": true, "VALUES": true, "TABLE": true, "EXPLAIN": true,
	"SET": true, "RESET": true, "DISCARD": true, "DEALLOCATE": true, "PREPARE": true,
	"LISTEN": true, "UNLISTEN": true, "DECLARE": true, "FETCH": true, "MOVE": true,
	"CLOSE": true, "SAVEPOINT": true, "RELEASE": true, "CHECKPOINT": true, "LOAD": true,
}

// mayWrite lists the statements readOnly calls read-only whose text cannot
// tell: they call functions (a plpgsql function that inserts, a set-
// returning one in FROM), read views, or EXPLAIN ANALYZE a write. The
// others of readOnly run no user code.
var mayWrite = map[string]bool{
	"SELECT": true, "VALUES": true, "TABLE": true, "WITH": true, "EXPLAIN": true, "COPY": true,
}

// txControl lists statements that begin, end or mark a transaction.
var txControl = map[string]bool{
	"BEGIN": true, "START": true, "COMMIT": true, "END": true, "ROLLBACK": true,
	"ABORT": true, "SAVEPOINT": true, "RELEASE": true, "PREPARE": true,
}

// commitPoint reports whether running stmts, starting in transaction status
// tx ('I' idle, 'T' in a transaction, 'E' in a failed one), makes something
// durable by its text alone: a COMMIT of an open transaction, COMMIT
// PREPARED, or a statement that writes outside an explicit transaction
// (autocommit). Every statement but the read-only ones counts as writing,
// CALL and DO among them: a procedure or DO block may COMMIT inside, and
// then no question asked after it could see what it wrote before. So may
// nextval and setval, whose writes are not transactional and assign no
// transaction ID most of the time.
func commitPoint(stmts []statement, tx byte) bool {
	commit := false
	for _, s := range stmts {
		switch s.keyword {
		case "BEGIN", "START":
			tx = 'T'
		case "COMMIT", "END":
			if s.second == "PREPARED" || tx == 'T' {
				commit = true
			}
			tx = 'I'
		case "ROLLBACK", "ABORT":
			if s.second != "TO" && s.second != "PREPARED" {
				tx = 'I'
			}
		case "PREPARE":
			if s.second == "TRANSACTION" {
				tx = 'I'
			}
		default:
			if tx == 'I' && writes(s) {
				commit = true
			}
		}
	}
	return commit
}

func writes(s statement) bool {
	if s.sequence {
		return true
	}
	switch s.keyword {
	case "WITH":
		return s.modifies
	case "COPY":
		return s.copyFrom
	}
	return !readOnly[s.keyword]
}

// needsProbe reports whether the proxy must ask the server if stmts wrote:
// they run outside a transaction block, their text shows no commit point,
// one of them may call code that writes, and none begins or ends a
// transaction (which would move the question into another one). Asking
// appends a statement to the client's in the same implicit transaction;
// for a single statement of mayWrite that changes nothing the statement
// can tell (the statements that refuse to run in a transaction block are
// none of them), and several statements in one query string already share
// an implicit transaction block.
func needsProbe(stmts []statement, tx byte) bool {
	if tx != 'I' || commitPoint(stmts, tx) {
		return false
	}
	may := false
	for _, s := range stmts {
		if txControl[s.keyword] {
			return false
		}
		may = may || mayWrite[s.keyword] && !s.inert
	}
	return may
}

// Local reports whether the query string sql touches nothing another
// session can see or wait for, whatever runs around it: every statement
// in it starts a transaction (BEGIN, START TRANSACTION, with any modes:
// PostgreSQL takes the snapshot at the first statement after it, not at
// BEGIN), sets or releases a savepoint, or sets a setting of the session
// or the transaction (SET, SET LOCAL). None of them takes a lock another
// session could wait for or releases one it waits for. SET CONSTRAINTS
// is not local (it runs deferred checks and triggers), nor is SET
// TRANSACTION SNAPSHOT (it needs the exporting transaction still open),
// nor ROLLBACK TO SAVEPOINT (it releases the locks taken since). A string
// with no statement is not local.
func Local(sql string) bool { return localStatements(splitSQL(sql)) }

func localStatements(stmts []statement) bool {
	for _, s := range stmts {
		if !localStatement(s) {
			return false
		}
	}
	return len(stmts) > 0
}

func localStatement(s statement) bool {
	switch s.keyword {
	case "BEGIN", "SAVEPOINT", "RELEASE":
		return true
	case "START":
		return s.second == "TRANSACTION"
	case "SET":
		return s.second != "CONSTRAINTS" && (s.second != "TRANSACTION" || s.third != "SNAPSHOT")
	}
	return false
}

// unholdable says why stmts, starting in transaction status tx, cannot
// run inside a transaction the proxy opens around them (Hold), or ""
// when they can: they must run outside a transaction block, begin or end
// no transaction themselves, and each be allowed in a transaction block.
func unholdable(stmts []statement, tx byte) string {
	if tx != 'I' {
		return "it runs inside a transaction block, whose COMMIT is what commits it"
	}
	for _, s := range stmts {
		if txControl[s.keyword] {
			return "it begins or ends a transaction itself (" + s.keyword + ")"
		}
		if what := outsideTransactionOnly(s); what != "" {
			return what + " cannot run inside a transaction block"
		}
	}
	return ""
}

// outsideTransactionOnly names s when PostgreSQL refuses to run it inside
// a transaction block (error 25001), or returns "".
func outsideTransactionOnly(s statement) string {
	switch s.keyword {
	case "VACUUM":
		return "VACUUM"
	case "CREATE", "DROP", "ALTER":
		switch {
		case s.second == "DATABASE" && s.keyword != "ALTER", s.second == "TABLESPACE",
			s.second == "SUBSCRIPTION", s.keyword == "ALTER" && s.second == "SYSTEM":
			return s.keyword + " " + s.second
		case s.concurrently:
			return s.keyword + " ... CONCURRENTLY"
		}
	case "REINDEX":
		if s.concurrently || s.second == "SYSTEM" || s.second == "DATABASE" {
			return "REINDEX " + s.second
		}
	case "CLUSTER":
		if s.second == "" {
			return "CLUSTER without a table"
		}
	case "DISCARD":
		if s.second == "ALL" {
			return "DISCARD ALL"
		}
	}
	return ""
}
