// Package text holds the few rules by which twice shortens and words text
// for a message or a report, so every surface cuts a statement, counts a
// noun and takes an error's first line alike.
package text

import (
	"fmt"
	"strings"
)

// oneLineMax is how many characters OneLine keeps: a statement long
// enough to recognise, short enough for one log or report line.
const oneLineMax = 120

// OneLine folds s's white space (newlines and runs of spaces or tabs) to
// single spaces and cuts it at 120 characters, the last three of them
// "..." when it was longer.
func OneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > oneLineMax {
		s = string(r[:oneLineMax-3]) + "..."
	}
	return s
}

// FirstLine is s up to its first newline: the gist of a multi-line error
// or output.
func FirstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// Plural is word for one, word+"s" for any other count, zero included.
func Plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}

// Name is what an enum's String method says: names[v], or typ(v) for a
// value names does not name ("Policy(7)").
func Name[T ~int](names []string, v T, typ string) string {
	if v < 0 || int(v) >= len(names) || names[v] == "" {
		return fmt.Sprintf("%s(%d)", typ, int(v))
	}
	return names[v]
}
