package sqllex_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/runtwice/twice/internal/sqllex"
)

// tok is what a case says of a token; Start is checked by
// FuzzTokensCoverTheText.
type tok struct {
	Kind         sqllex.Kind
	Text         string
	Line         int
	Unterminated bool
}

func lex(sql string) []tok {
	var got []tok
	for t := range sqllex.Tokens(sql) {
		got = append(got, tok{t.Kind, t.Text, t.Line, t.Unterminated})
	}
	return got
}

const (
	space   = sqllex.Space
	comment = sqllex.Comment
	word    = sqllex.Word
	str     = sqllex.String
	ident   = sqllex.QuotedIdent
	dollar  = sqllex.DollarString
	param   = sqllex.Param
	number  = sqllex.Number
	semi    = sqllex.Semicolon
	punct   = sqllex.Punct
)

func TestTokens(t *testing.T) {
	for _, tc := range []struct {
		name string
		sql  string
		want []tok
	}{
		{"empty", "", nil},
		{"words and a semicolon", "SELECT a_1;", []tok{{word, "SELECT", 1, false}, {space, " ", 1, false}, {word, "a_1", 1, false}, {semi, ";", 1, false}}},
		{"doubled quotes", "'it''s; here';x", []tok{{str, "'it''s; here'", 1, false}, {semi, ";", 1, false}, {word, "x", 1, false}}},
		{"empty string", "''''''", []tok{{str, "''''''", 1, false}}},
		{"E string with backslash escapes", `E'a\'; b\\';`, []tok{{str, `E'a\'; b\\'`, 1, false}, {semi, ";", 1, false}}},
		{"e string, lower case", `e'\'' x`, []tok{{str, `e'\''`, 1, false}, {space, " ", 1, false}, {word, "x", 1, false}}},
		{"E string with a doubled quote", `E'a'';'`, []tok{{str, `E'a'';'`, 1, false}}},
		{"standard conforming string: a backslash is itself", `'a\';b`, []tok{{str, `'a\'`, 1, false}, {semi, ";", 1, false}, {word, "b", 1, false}}},
		{"a word ending in e does not prefix an escape string", `date'x\';y`, []tok{{word, "date", 1, false}, {str, `'x\'`, 1, false}, {semi, ";", 1, false}, {word, "y", 1, false}}},
		{"other prefixes are words", "B'01' X'1f' N'n'", []tok{{word, "B", 1, false}, {str, "'01'", 1, false}, {space, " ", 1, false}, {word, "X", 1, false}, {str, "'1f'", 1, false}, {space, " ", 1, false}, {word, "N", 1, false}, {str, "'n'", 1, false}}},
		{"quoted identifier", `"a""b;c".d`, []tok{{ident, `"a""b;c"`, 1, false}, {punct, ".", 1, false}, {word, "d", 1, false}}},
		{"a backslash in a quoted identifier is itself", `"a\";x`, []tok{{ident, `"a\"`, 1, false}, {semi, ";", 1, false}, {word, "x", 1, false}}},
		{"$$ dollar quote", "$$a;'b\"$$;", []tok{{dollar, "$$a;'b\"$$", 1, false}, {semi, ";", 1, false}}},
		{"$tag$ dollar quote holds other tags", "$f$ $$; $g$ $f$;", []tok{{dollar, "$f$ $$; $g$ $f$", 1, false}, {semi, ";", 1, false}}},
		{"a tag may hold digits after its first byte", "$a1$;$a1$", []tok{{dollar, "$a1$;$a1$", 1, false}}},
		{"$1 is a parameter, not a dollar quote", "$1;$23::int", []tok{{param, "$1", 1, false}, {semi, ";", 1, false}, {param, "$23", 1, false}, {punct, ":", 1, false}, {punct, ":", 1, false}, {word, "int", 1, false}}},
		{"$1a$ is a parameter and a word", "$1a$", []tok{{param, "$1", 1, false}, {word, "a$", 1, false}}},
		{"a $ inside a word is the word's", "a$b$ c;$b$", []tok{{word, "a$b$", 1, false}, {space, " ", 1, false}, {word, "c", 1, false}, {semi, ";", 1, false}, {dollar, "$b$", 1, true}}},
		{"a lone $", "$x;", []tok{{punct, "$", 1, false}, {word, "x", 1, false}, {semi, ";", 1, false}}},
		{"nested block comments", "/* a /* b; */ c; */;", []tok{{comment, "/* a /* b; */ c; */", 1, false}, {semi, ";", 1, false}}},
		{"/*/ opens a comment only", "/*/ x; */y", []tok{{comment, "/*/ x; */", 1, false}, {word, "y", 1, false}}},
		{"-- comment ends before the newline", "a -- b; c\nd", []tok{{word, "a", 1, false}, {space, " ", 1, false}, {comment, "-- b; c", 1, false}, {space, "\n", 1, false}, {word, "d", 2, false}}},
		{"-- comment at the end of the text", "x; -- last;", []tok{{word, "x", 1, false}, {semi, ";", 1, false}, {space, " ", 1, false}, {comment, "-- last;", 1, false}}},
		{"a lone - and /", "a-b/c", []tok{{word, "a", 1, false}, {punct, "-", 1, false}, {word, "b", 1, false}, {punct, "/", 1, false}, {word, "c", 1, false}}},
		{"numbers are digits; their other parts are tokens", "1.5e3 12", []tok{{number, "1", 1, false}, {punct, ".", 1, false}, {number, "5", 1, false}, {word, "e3", 1, false}, {space, " ", 1, false}, {number, "12", 1, false}}},
		{"non-ASCII words", "café;ü", []tok{{word, "café", 1, false}, {semi, ";", 1, false}, {word, "ü", 1, false}}},
		{"all white space", " \t\r\n\f\vx", []tok{{space, " \t\r\n\f\v", 1, false}, {word, "x", 2, false}}},
		{"unterminated string", "'a;\nb", []tok{{str, "'a;\nb", 1, true}}},
		{"unterminated doubled quote", "'a''", []tok{{str, "'a''", 1, true}}},
		{"unterminated E string after a backslash", `E'a\`, []tok{{str, `E'a\`, 1, true}}},
		{"unterminated quoted identifier", `x "a;`, []tok{{word, "x", 1, false}, {space, " ", 1, false}, {ident, `"a;`, 1, true}}},
		{"unterminated dollar quote", "$q$ a; $q", []tok{{dollar, "$q$ a; $q", 1, true}}},
		{"unterminated block comment", "/* a /* b */ c;", []tok{{comment, "/* a /* b */ c;", 1, true}}},
		{"line counting across every kind", "'a\nb'\n\"c\nd\" $$\n$$ /*\n/*\n*/\n*/ -- x\nE'\\\n' y\n;", []tok{
			{str, "'a\nb'", 1, false},
			{space, "\n", 2, false},
			{ident, "\"c\nd\"", 3, false},
			{space, " ", 4, false},
			{dollar, "$$\n$$", 4, false},
			{space, " ", 5, false},
			{comment, "/*\n/*\n*/\n*/", 5, false},
			{space, " ", 8, false},
			{comment, "-- x", 8, false},
			{space, "\n", 8, false},
			{str, "E'\\\n'", 9, false},
			{space, " ", 10, false},
			{word, "y", 10, false},
			{space, "\n", 10, false},
			{semi, ";", 11, false},
		}},
		{"CRLF counts one line", "a\r\nb", []tok{{word, "a", 1, false}, {space, "\r\n", 1, false}, {word, "b", 2, false}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, lex(tc.sql)); diff != "" {
				t.Errorf("Tokens(%q) mismatch (-want +got):\n%s", tc.sql, diff)
			}
		})
	}
}

func TestTokensStopWhenTold(t *testing.T) {
	n := 0
	for range sqllex.Tokens("a b c") {
		n++
		if n == 2 {
			break
		}
	}
	if n != 2 {
		t.Errorf("tokens seen = %d, want 2", n)
	}
}

func TestTokenHelpers(t *testing.T) {
	for _, tc := range []struct {
		name        string
		sql         string
		blank, atom bool
		end         int
	}{
		{"space", "  ", true, false, 2},
		{"line comment", "-- ATOMIC", true, false, 9},
		{"block comment", "/* */", true, false, 5},
		{"the word, any case", "Atomic", false, true, 6},
		{"a quoted name is no word", `"ATOMIC"`, false, false, 8},
		{"a string is no word", "'atomic'", false, false, 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for tk := range sqllex.Tokens(tc.sql) {
				if got := tk.Blank(); got != tc.blank {
					t.Errorf("Blank() = %v, want %v", got, tc.blank)
				}
				if got := tk.IsWord("ATOMIC"); got != tc.atom {
					t.Errorf("IsWord(%q) = %v, want %v", "ATOMIC", got, tc.atom)
				}
				if got := tk.End(); got != tc.end {
					t.Errorf("End() = %d, want %d", got, tc.end)
				}
			}
		})
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[sqllex.Kind]string{sqllex.Space: "Space", sqllex.Punct: "Punct", 0: "Kind(0)", 42: "Kind(42)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}

// The tokens put together are the text, each starts where the one before
// ended, on the line its offset is on, and none is empty.
func FuzzTokensCoverTheText(f *testing.F) {
	for _, s := range []string{"SELECT 1;", "E'\\';'", "$a$;$a$", "/* /* */ */", "a$b$", "$1", "'", "\"x\n", "-- c\n;"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		end := 0
		for tk := range sqllex.Tokens(sql) {
			if tk.Start != end || tk.Text == "" || sql[tk.Start:tk.End()] != tk.Text {
				t.Fatalf("Tokens(%q): token %+v does not follow offset %d", sql, tk, end)
			}
			if want := 1 + strings.Count(sql[:tk.Start], "\n"); tk.Line != want {
				t.Fatalf("Tokens(%q): token %+v on line %d, want %d", sql, tk, tk.Line, want)
			}
			if tk.Unterminated && tk.End() != len(sql) {
				t.Fatalf("Tokens(%q): unterminated token %+v ends before the text", sql, tk)
			}
			end = tk.End()
		}
		if end != len(sql) {
			t.Fatalf("Tokens(%q) end at %d, want %d", sql, end, len(sql))
		}
	})
}
