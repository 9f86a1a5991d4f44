package wireproxy

import "testing"

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
