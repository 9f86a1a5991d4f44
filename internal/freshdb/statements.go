package freshdb

import (
	"strings"

	"github.com/runtwice/twice/internal/sqllex"
)

// span is the lines (1-based, inclusive) one statement of a step's text
// takes, from its first character that is not space or comment to its
// semicolon (or the end of the text).
type span struct{ first, last int }

// statementSpans splits sql into its statements as the server's simple
// query protocol runs them: at semicolons outside quotes and comments
// (sqllex). Empty statements, which the server skips, are left out. ok is
// false where the split cannot be trusted: a BEGIN ATOMIC function body
// holds semicolons of its own.
func statementSpans(sql string) (spans []span, ok bool) {
	first, begin := 0, false
	for t := range sqllex.Tokens(sql) {
		switch {
		case t.Kind == sqllex.Semicolon:
			if first > 0 {
				spans = append(spans, span{first, t.Line})
			}
			first, begin = 0, false
		case t.Blank():
		case begin && t.IsWord("ATOMIC"):
			return nil, false
		default:
			if first == 0 {
				first = t.Line
			}
			begin = t.IsWord("BEGIN")
		}
	}
	if first > 0 {
		spans = append(spans, span{first, 1 + strings.Count(sql, "\n")})
	}
	return spans, true
}
