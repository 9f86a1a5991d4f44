package freshdb

import (
	"strings"
)

// span is the lines (1-based, inclusive) one statement of a step's text
// takes, from its first character that is not space or comment to its
// semicolon.
type span struct{ first, last int }

// statementSpans splits sql into its statements as the server's simple
// query protocol runs them: at semicolons outside quotes ('...', E'...',
// "..."), dollar quotes ($$...$$, $tag$...$tag$) and comments (--, nested
// /* */). Empty statements, which the server skips, are left out. ok is
// false where the split cannot be trusted: a BEGIN ATOMIC function body
// holds semicolons of its own.
func statementSpans(sql string) (spans []span, ok bool) {
	if strings.Contains(strings.ToUpper(sql), "BEGIN ATOMIC") {
		return nil, false
	}
	line, first := 1, 0
	end := func() {
		if first > 0 {
			spans = append(spans, span{first, line})
		}
		first = 0
	}
	mark := func() {
		if first == 0 {
			first = line
		}
	}
	for i := 0; i < len(sql); i++ {
		c := sql[i]
		switch {
		case c == '\n':
			line++
		case c == ';':
			end()
		case c == '-' && i+1 < len(sql) && sql[i+1] == '-':
			for i < len(sql) && sql[i] != '\n' {
				i++
			}
			i-- // the newline counts the line
		case c == '/' && i+1 < len(sql) && sql[i+1] == '*':
			depth := 0
			for ; i < len(sql); i++ {
				switch {
				case sql[i] == '\n':
					line++
				case sql[i] == '/' && i+1 < len(sql) && sql[i+1] == '*':
					depth++
					i++
				case sql[i] == '*' && i+1 < len(sql) && sql[i+1] == '/':
					depth--
					i++
				}
				if depth == 0 {
					break
				}
			}
		case c == '\'' || c == '"':
			mark()
			escapes := c == '\'' && i > 0 && (sql[i-1] == 'E' || sql[i-1] == 'e')
			for i++; i < len(sql); i++ {
				if sql[i] == '\n' {
					line++
				}
				if escapes && sql[i] == '\\' {
					i++
					continue
				}
				if sql[i] == c {
					if i+1 < len(sql) && sql[i+1] == c {
						i++ // a doubled quote stands for itself
						continue
					}
					break
				}
			}
		case c == '$':
			mark()
			tag, isTag := dollarTag(sql[i:])
			if !isTag {
				continue
			}
			n := strings.Index(sql[i+len(tag):], tag)
			if n < 0 {
				n = len(sql) - i - len(tag)
			} else {
				n += len(tag)
			}
			line += strings.Count(sql[i:i+len(tag)+n], "\n")
			i += len(tag) + n - 1
		case c == ' ' || c == '\t' || c == '\r':
		default:
			mark()
		}
	}
	end()
	return spans, true
}

// dollarTag is the $tag$ that s starts with, if it starts a dollar quote
// ($1 is a parameter, not a quote).
func dollarTag(s string) (string, bool) {
	for j := 1; j < len(s); j++ {
		c := s[j]
		switch {
		case c == '$':
			return s[:j+1], true
		case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80 || j > 1 && c >= '0' && c <= '9':
		default:
			return "", false
		}
	}
	return "", false
}
