package sqllex_test

import (
	"fmt"

	"github.com/runtwice/twice/internal/sqllex"
)

// The statements of a text, with the lines they start on, and their words
// outside quotes and comments.
func ExampleTokens() {
	sql := "INSERT INTO t VALUES ('a;b'); -- x;\nDO $$ BEGIN NULL; END $$;"
	start := true
	for t := range sqllex.Tokens(sql) {
		switch t.Kind {
		case sqllex.Semicolon:
			fmt.Println()
			start = true
		case sqllex.Word:
			if start {
				fmt.Printf("line %d:", t.Line)
				start = false
			}
			fmt.Print(" ", t.Text)
		}
	}
	// Output:
	// line 1: INSERT INTO t VALUES
	// line 2: DO
}
