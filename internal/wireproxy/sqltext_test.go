package wireproxy

import (
	"bytes"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

func TestCommitPoint(t *testing.T) {
	for _, tc := range []struct {
		name   string
		sql    string
		tx     byte
		stmts  int
		commit bool
	}{
		{"select", "SELECT 1", 'I', 1, false},
		{"insert autocommit", "INSERT INTO t VALUES (1)", 'I', 1, true},
		{"insert in a transaction", "insert into t values (1)", 'T', 1, false},
		{"update", "  UPDATE t SET a = 1", 'I', 1, true},
		{"delete after a comment", "/* a /* nested */ one */ -- line\nDELETE FROM t", 'I', 1, true},
		{"merge", "MERGE INTO t USING s ON true WHEN MATCHED THEN DELETE", 'I', 1, true},
		{"commit", "COMMIT", 'T', 1, true},
		{"end", "end", 'T', 1, true},
		{"commit of a failed transaction rolls back", "COMMIT", 'E', 1, false},
		{"commit outside a transaction", "COMMIT", 'I', 1, false},
		{"commit prepared", "COMMIT PREPARED 'x'", 'I', 1, true},
		{"rollback", "ROLLBACK", 'T', 1, false},
		{"begin", "BEGIN", 'I', 1, false},
		{"set", "SET search_path = x", 'I', 1, false},
		{"with that writes", "WITH a AS (INSERT INTO t VALUES (1) RETURNING *) SELECT * FROM a", 'I', 1, true},
		{"with that reads", "WITH a AS (SELECT 1) SELECT * FROM a", 'I', 1, false},
		{"copy from", "COPY t (a) FROM STDIN", 'I', 1, true},
		{"copy to", "COPY (SELECT a FROM t) TO STDOUT", 'I', 1, false},
		{"ddl", "CREATE TABLE x (a int)", 'I', 1, true},
		{"select calling a function", "SELECT do_things()", 'I', 1, false},
		{"whole transaction in one query", "BEGIN; INSERT INTO t VALUES (1); COMMIT", 'I', 3, true},
		{"rolled back in one query", "BEGIN; INSERT INTO t VALUES (1); ROLLBACK", 'I', 3, false},
		{"rollback to savepoint keeps the transaction", "ROLLBACK TO SAVEPOINT s; INSERT INTO t VALUES (1)", 'T', 2, false},
		{"semicolons in literals", `SELECT ';', E'\';', "a;b", $$;$$, $tag$ ; $tag$, $1; INSERT INTO t VALUES (1)`, 'I', 2, true},
		{"keywords in literals", "SELECT 'INSERT', $$DELETE$$", 'I', 1, false},
		{"a $ in a name opens no dollar quote", "SELECT a$b$; INSERT INTO t VALUES (1); SELECT $b$", 'I', 3, true},
		{"a typed literal is no escape string", `SELECT date'x\'; INSERT INTO t VALUES (1)`, 'I', 2, true},
		{"keywords in quoted names and comments", `SELECT "insert" /* DELETE */ -- UPDATE`, 'I', 1, false},
		{"nextval", "SELECT nextval('s')", 'I', 1, true},
		{"setval", "select SetVal('s', 5)", 'I', 1, true},
		{"nextval in a literal", "SELECT 'nextval'", 'I', 1, false},
		{"call", "CALL p()", 'I', 1, true},
		{"do", "DO $$ BEGIN COMMIT; END $$", 'I', 1, true},
		{"ping", "-- ping", 'I', 0, false},
		{"empty statements", " ; ;\n", 'I', 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stmts := splitSQL(tc.sql)
			if len(stmts) != tc.stmts {
				t.Errorf("splitSQL(%q) = %+v, want %d statements", tc.sql, stmts, tc.stmts)
			}
			if got := commitPoint(stmts, tc.tx); got != tc.commit {
				t.Errorf("commitPoint(%q, %q) = %v, want %v", tc.sql, tc.tx, got, tc.commit)
			}
		})
	}
}

func TestNeedsProbe(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		tx   byte
		asks bool
	}{
		{"SELECT f()", 'I', true},
		{"SELECT * FROM f()", 'I', true},
		{"VALUES (f())", 'I', true},
		{"TABLE v", 'I', true},
		{"WITH a AS (SELECT f()) SELECT * FROM a", 'I', true},
		{"EXPLAIN ANALYZE UPDATE t SET a = 1", 'I', true},
		{"COPY (SELECT f()) TO STDOUT", 'I', true},
		{"SET search_path = x; SELECT f()", 'I', true},
		{"SELECT f()", 'T', false},                      // inside a transaction only COMMIT counts
		{"SELECT f()", 'E', false},                      // a failed transaction commits nothing
		{"INSERT INTO t VALUES (1)", 'I', false},        // a commit point by its text
		{"SELECT nextval('s')", 'I', false},             // likewise
		{"BEGIN; SELECT f()", 'I', false},               // the question would be the open transaction's
		{"SELECT f(); COMMIT", 'I', false},              // and here the next one's
		{"DISCARD ALL", 'I', false},                     // runs no user code, and refuses a transaction block
		{"SHOW search_path", 'I', false},                // runs no user code
		{"DECLARE c CURSOR FOR SELECT f()", 'I', false}, // an error outside a transaction block, which the question would hide
		// Constants and parameters cast to built-in types run no user code.
		{"SELECT 1", 'I', false},
		{"SELECT\f1,\v2", 'I', false}, // form and vertical feeds are white space
		{"SELECT $1::int", 'I', false},
		{"SELECT 'a'::text AS name, NULL, $2::double precision AS x -- note", 'I', false},
		{"SELECT $1::int; SELECT 2", 'I', false},
		// Anything else may.
		{"SELECT $1::int; SELECT f()", 'I', true},
		{"SELECT $1::mytype", 'I', true},    // a domain's check, a user cast
		{`SELECT $1::"int"`, 'I', true},     // a quoted name may be anyone's
		{"SELECT -1", 'I', true},            // an operator
		{"SELECT 1e5", 'I', true},           // not worth telling from a word
		{"SELECT x", 'I', true},             // a name
		{"SELECT 1 AS n FROM t", 'I', true}, // a table or a view
		{"SELECT 1 INTO t", 'I', true},      // creates a table
		{"VALUES (1)", 'I', true},
	} {
		if got := needsProbe(splitSQL(tc.sql), tc.tx); got != tc.asks {
			t.Errorf("needsProbe(%q, %q) = %v, want %v", tc.sql, tc.tx, got, tc.asks)
		}
	}
}

func TestCanProbe(t *testing.T) {
	for v, want := range map[string]bool{"15.8 (Debian 15.8-1.pgdg120+1)": true, "13.0": true, "16beta1": true, "12.19": false, "9.6.24": false, "": false} {
		if got := canProbe(v); got != want {
			t.Errorf("canProbe(%q) = %v, want %v", v, got, want)
		}
	}
}

func TestFrameScannerSplitsAnywhere(t *testing.T) {
	// ParseComplete, an ErrorResponse, an empty-bodied message and a
	// ReadyForQuery, fed one byte at a time and all at once.
	stream := []byte{'1', 0, 0, 0, 4,
		'E', 0, 0, 0, 12, 'C', '4', '2', '6', '0', '1', 0, 0,
		'n', 0, 0, 0, 4,
		'Z', 0, 0, 0, 5, 'T'}
	for _, step := range []int{1, 2, 3, len(stream)} {
		c := &conn{p: &Proxy{}}
		c.pending = []reply{{step: &Step{Index: 1}}}
		for i := 0; i < len(stream); i += step {
			c.scan.feed(stream[i:min(i+step, len(stream))], c)
		}
		if len(c.finished) != 1 || c.tx != 'T' {
			t.Fatalf("chunks of %d: finished = %+v, tx = %q; want one step finished, tx 'T'", step, c.finished, c.tx)
		}
		if c.finished[0].err == nil {
			t.Errorf("chunks of %d: the step's error was not seen", step)
		}
	}
}

func TestProbeRepliesSplitAnywhere(t *testing.T) {
	msg := func(m pgproto3.BackendMessage) []byte {
		b, err := m.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var client []byte
	for _, m := range []pgproto3.BackendMessage{
		&pgproto3.ParseComplete{}, &pgproto3.BindComplete{},
		&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte("n")}}},
		&pgproto3.DataRow{Values: [][]byte{[]byte("5")}},
		&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")},
		&pgproto3.NoticeResponse{Message: "hello"},
	} {
		client = append(client, msg(m)...)
	}
	probe := func(xid []byte) []byte {
		var b []byte
		for _, m := range []pgproto3.BackendMessage{
			&pgproto3.ParseComplete{}, &pgproto3.BindComplete{},
			&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{{Name: []byte(probeColumn)}}},
			&pgproto3.DataRow{Values: [][]byte{xid}},
			&pgproto3.CommandComplete{CommandTag: []byte("SELECT 1")},
			&pgproto3.CloseComplete{},
		} {
			b = append(b, msg(m)...)
		}
		return b
	}
	ready := msg(&pgproto3.ReadyForQuery{TxStatus: 'I'})
	for _, tc := range []struct {
		name   string
		xid    []byte
		commit bool
	}{{"xid assigned", []byte("1234"), true}, {"no xid", nil, false}} {
		stream := append(append(append([]byte(nil), client...), probe(tc.xid)...), ready...)
		for _, step := range []int{1, 2, 3, 7, len(stream)} {
			c := &conn{p: &Proxy{}}
			c.pending = []reply{{step: &Step{Index: 1}, probe: probeExtended}}
			for i := 0; i < len(stream); i += step {
				c.scan.feed(stream[i:min(i+step, len(stream))], c)
			}
			if want := append(append([]byte(nil), client...), ready...); !bytes.Equal(c.out, want) {
				t.Errorf("%s, chunks of %d: the client got\n%q\nwant\n%q", tc.name, step, c.out, want)
			}
			if len(c.finished) != 1 || c.finished[0].step.CommitPoint != tc.commit {
				t.Errorf("%s, chunks of %d: finished = %+v, want the step with CommitPoint %v", tc.name, step, c.finished, tc.commit)
			}
		}
	}
}

func TestLocal(t *testing.T) {
	for _, tc := range []struct {
		sql   string
		local bool
	}{
		{"BEGIN", true},
		{"begin isolation level repeatable read", true},
		{"BEGIN ISOLATION LEVEL SERIALIZABLE, READ ONLY, DEFERRABLE", true},
		{"START TRANSACTION READ WRITE", true},
		{"  /* pgx */ begin", true},
		{"SAVEPOINT s1", true},
		{"RELEASE SAVEPOINT s1", true},
		{"release s1", true},
		{"SET LOCAL lock_timeout = '1s'", true},
		{"SET search_path = app, public", true},
		{"SET TRANSACTION ISOLATION LEVEL SERIALIZABLE", true},
		{"BEGIN; SET LOCAL statement_timeout = 0", true},
		{"SET CONSTRAINTS ALL IMMEDIATE", false},
		{"SET TRANSACTION SNAPSHOT '00000003-0000001B-1'", false},
		{"ROLLBACK TO SAVEPOINT s1", false},
		{"START something", false},
		{"COMMIT", false},
		{"ROLLBACK", false},
		{"SELECT 1", false},
		{"SELECT set_config('a.b', 'c', true)", false},
		{"SELECT nextval('s')", false},
		{"BEGIN; INSERT INTO t VALUES (1); COMMIT", false},
		{"BEGIN; SELECT 1", false},
		{"RESET ALL", false},
		{"", false},
		{"-- nothing", false},
		{"SET x = 'BEGIN'; DELETE FROM t", false},
	} {
		if got := Local(tc.sql); got != tc.local {
			t.Errorf("Local(%q) = %v, want %v", tc.sql, got, tc.local)
		}
	}
}
