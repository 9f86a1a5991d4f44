// Package sqllex splits PostgreSQL SQL text into tokens, as far as the
// server's own lexer (scan.l) decides where a statement ends and which
// words stand outside quotes and comments: string literals ('...' with
// doubled quotes, E'...' with backslash escapes), quoted identifiers
// ("..."), dollar quotes ($$...$$, $tag$...$tag$), parameters ($1), and
// -- and nested /* */ comments. It is the one lexer of the migration
// splitter (internal/freshdb) and the proxy's statement reader
// (internal/wireproxy), so a lexing bug is fixed once.
//
// It assumes standard_conforming_strings is on (the default since
// PostgreSQL 9.1): a backslash escapes only in E'...'. It never fails:
// text the server would refuse still lexes, a quote or comment left open
// runs to the end of the text, and the tokens' texts put together are the
// text again.
package sqllex

import (
	"iter"
	"strconv"
	"strings"
)

// Kind is what a token is.
type Kind uint8

// The kinds of token.
const (
	Space        Kind = iota + 1 // spaces, tabs, newlines, carriage returns, form and vertical feeds
	Comment                      // -- to the end of the line (without the newline), or /* */, nested
	Word                         // a keyword or unquoted identifier: a letter, _ or non-ASCII byte, then those, digits and $
	String                       // '...' or E'...' (any other prefix, B'...', X'...', N'...', is a Word before it)
	QuotedIdent                  // "..."
	DollarString                 // $$...$$ or $tag$...$tag$
	Param                        // $ and decimal digits: a parameter, not a dollar quote
	Number                       // a run of decimal digits; a number's other parts (1.5, 1e5) are tokens of their own
	Semicolon                    // ; outside quotes and comments: the end of a statement
	Punct                        // one byte of anything else: an operator, a parenthesis, a comma, a lone $
)

var kindNames = [...]string{"Kind(0)", "Space", "Comment", "Word", "String", "QuotedIdent", "DollarString", "Param", "Number", "Semicolon", "Punct"}

// String is the kind's name, as its constant spells it.
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Token is one token of a text.
type Token struct {
	Text  string // the token's bytes, quotes and comment marks included
	Start int    // byte offset of Text in the text
	Line  int    // 1-based line of Text's first byte
	Kind  Kind
	// Unterminated is set on a String, QuotedIdent, DollarString or /*
	// Comment that the text ends inside.
	Unterminated bool
}

// End is the byte offset just after the token.
func (t Token) End() int { return t.Start + len(t.Text) }

// Blank reports whether the token is space or a comment, which the server
// skips.
func (t Token) Blank() bool { return t.Kind == Space || t.Kind == Comment }

// IsWord reports whether the token is the word w, in any case.
func (t Token) IsWord(w string) bool { return t.Kind == Word && strings.EqualFold(t.Text, w) }

// Tokens yields the tokens of sql in order, blanks included.
func Tokens(sql string) iter.Seq[Token] {
	return func(yield func(Token) bool) {
		line := 1
		for i := 0; i < len(sql); {
			t := next(sql, i)
			t.Line = line
			if !yield(t) {
				return
			}
			switch t.Kind {
			case Space, Comment, String, QuotedIdent, DollarString: // the kinds a newline can be in
				line += strings.Count(t.Text, "\n")
			}
			i = t.End()
		}
	}
}

// next lexes the token that starts at sql[i].
func next(sql string, i int) Token {
	switch c := sql[i]; {
	case isSpace(c):
		return run(Space, sql, i, isSpace)
	case strings.HasPrefix(sql[i:], "--"):
		j := strings.IndexByte(sql[i:], '\n')
		if j < 0 {
			j = len(sql) - i
		}
		return Token{Kind: Comment, Start: i, Text: sql[i : i+j]}
	case strings.HasPrefix(sql[i:], "/*"):
		return blockComment(sql, i)
	case c == '\'':
		return quoted(String, sql, i, i, false)
	case c == '"':
		return quoted(QuotedIdent, sql, i, i, false)
	case c == '$':
		return dollar(sql, i)
	case c == ';':
		return Token{Kind: Semicolon, Start: i, Text: sql[i : i+1]}
	case isWordStart(c):
		return word(sql, i)
	case isDigit(c):
		return run(Number, sql, i, isDigit)
	}
	return Token{Kind: Punct, Start: i, Text: sql[i : i+1]}
}

// run lexes the token of kind k at sql[i] that runs while in holds.
func run(k Kind, sql string, i int, in func(byte) bool) Token {
	j := i + 1
	for j < len(sql) && in(sql[j]) {
		j++
	}
	return Token{Kind: k, Start: i, Text: sql[i:j]}
}

// blockComment lexes the /* comment at sql[i], with the comments nested in
// it.
func blockComment(sql string, i int) Token {
	depth := 0
	for j := i; j+1 < len(sql); {
		switch sql[j : j+2] {
		case "/*":
			depth++
			j += 2
		case "*/":
			depth--
			j += 2
			if depth == 0 {
				return Token{Kind: Comment, Start: i, Text: sql[i:j]}
			}
		default:
			j++
		}
	}
	return Token{Kind: Comment, Start: i, Text: sql[i:], Unterminated: true}
}

// quoted lexes the literal of kind k that starts at sql[start] and opens
// with the quote at sql[open]: a doubled quote stands for itself, and with
// backslash so does any byte after a backslash.
func quoted(k Kind, sql string, start, open int, backslash bool) Token {
	q := sql[open]
	for j := open + 1; j < len(sql); j++ {
		switch {
		case backslash && sql[j] == '\\':
			j++
		case sql[j] != q:
		case at(sql, j+1, q):
			j++
		default:
			return Token{Kind: k, Start: start, Text: sql[start : j+1]}
		}
	}
	return Token{Kind: k, Start: start, Text: sql[start:], Unterminated: true}
}

// dollar lexes what the $ at sql[i] starts: a dollar quote, a parameter,
// or the lone $.
func dollar(sql string, i int) Token {
	if tag, ok := dollarTag(sql[i:]); ok {
		n := strings.Index(sql[i+len(tag):], tag)
		if n < 0 {
			return Token{Kind: DollarString, Start: i, Text: sql[i:], Unterminated: true}
		}
		return Token{Kind: DollarString, Start: i, Text: sql[i : i+2*len(tag)+n]}
	}
	if i+1 < len(sql) && isDigit(sql[i+1]) {
		digits := run(Param, sql, i+1, isDigit)
		return Token{Kind: Param, Start: i, Text: sql[i:digits.End()]}
	}
	return Token{Kind: Punct, Start: i, Text: sql[i : i+1]}
}

// dollarTag is the $tag$ (or $$) that s starts with, if it starts one: the
// tag is a word without $.
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		switch c := s[j]; {
		case c == '$':
			return s[:j+1], true
		case isWordStart(c), j > 1 && isDigit(c):
		default:
			return "", false
		}
	}
	return "", false
}

// word lexes the word at sql[i], or the E'...' string it prefixes.
func word(sql string, i int) Token {
	j := i + 1
	for j < len(sql) && isWordPart(sql[j]) {
		j++
	}
	if j == i+1 && (sql[i] == 'E' || sql[i] == 'e') && at(sql, j, '\'') {
		return quoted(String, sql, i, j, true)
	}
	return Token{Kind: Word, Start: i, Text: sql[i:j]}
}

// at reports whether sql[i] is c.
func at(sql string, i int, c byte) bool { return i < len(sql) && sql[i] == c }

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isWordStart(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
}

func isWordPart(c byte) bool { return isWordStart(c) || isDigit(c) || c == '$' }
