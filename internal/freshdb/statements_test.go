package freshdb

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStatementSpans(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sql   string
		spans []span
		ok    bool
	}{
		{"one a line", "SELECT 1;\nSELECT 2;\n", []span{{1, 1}, {2, 2}}, true},
		{"over lines, past comments", "-- head\n/* a;\n b; */ INSERT\n INTO t;", []span{{3, 4}}, true},
		{"empty statements are left out", " ; ;\n-- only\n;", nil, true},
		{"the last statement runs to the end of the text", "SELECT 1;\nSELECT\n2\n-- tail\n", []span{{1, 1}, {2, 5}}, true},
		{"semicolons in quotes", "SELECT ';', \"a;b\", $$;$$, $t$;$t$, E'\\';';\nSELECT 2", []span{{1, 1}, {2, 2}}, true},
		{"a backslashed newline in an E string counts its line", "SELECT E'a\\\nb';\nSELECT 2;", []span{{1, 2}, {3, 3}}, true},
		{"a typed literal is no escape string", "SELECT date'x\\';\nSELECT 2;", []span{{1, 1}, {2, 2}}, true},
		{"a $ in a name opens no dollar quote", "SELECT a$b$;\nSELECT 2;", []span{{1, 1}, {2, 2}}, true},
		{"BEGIN ATOMIC", "CREATE FUNCTION f() RETURNS int LANGUAGE sql\nBEGIN ATOMIC SELECT 1; END;", nil, false},
		{"BEGIN ATOMIC over lines", "CREATE FUNCTION f() RETURNS int LANGUAGE sql BEGIN\n  atomic\n SELECT 1; END;", nil, false},
		{"BEGIN ATOMIC in a comment or a string", "-- BEGIN ATOMIC\nSELECT 'BEGIN ATOMIC';", []span{{2, 2}}, true},
		{"BEGIN; ATOMIC", "BEGIN;\nATOMIC;", []span{{1, 1}, {2, 2}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			spans, ok := statementSpans(tc.sql)
			if ok != tc.ok {
				t.Errorf("statementSpans(%q) ok = %v, want %v", tc.sql, ok, tc.ok)
			}
			if diff := cmp.Diff(tc.spans, spans, cmp.AllowUnexported(span{})); diff != "" {
				t.Errorf("statementSpans(%q) mismatch (-want +got):\n%s", tc.sql, diff)
			}
		})
	}
}
