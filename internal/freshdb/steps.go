package freshdb

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/internal/blame"
)

// Step is one part of a schema + fixtures setup. Exactly one of SQL and Func
// is set.
type Step struct {
	// Name is shown in errors: a file path, a migration file name, "SQL", or
	// a Go func's name. A Func step must have one.
	Name string
	// Key is what the template's content hash sees of a Func step besides
	// its Name: a func's code cannot be hashed, so the caller says which
	// func value this is (harness keys a func by its identity in the
	// process). Two Func steps with the same Name and Key share a template.
	Key string
	// SQL is executed as-is in one simple-protocol round trip, so it may hold
	// many statements (and BEGIN/COMMIT of its own).
	SQL string
	// Func runs with a connection to the template database being built.
	Func func(ctx context.Context, conn *pgx.Conn) error
	// Layout says where SQL came from when a migration tool's layout was
	// read (FromFS): "golang-migrate up file", "goose Up section", ...
	// Errors show it after the file name. Not part of the content hash.
	Layout string
	// Timeout bounds the step; zero means DefaultStepTimeout. A step still
	// running then fails with what its database's sessions were doing, and
	// its context is cancelled; one that ignores that is abandoned.
	Timeout time.Duration
}

// FromFiles reads SQL files into steps, one per file, in the given order.
// Each step is named after its path as given.
func FromFiles(paths ...string) ([]Step, error) {
	steps := make([]Step, 0, len(paths))
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, blame.Userf("cannot read schema file: %w", err)
		}
		steps = append(steps, Step{Name: p, SQL: string(b)})
	}
	return steps, nil
}

// checkSteps rejects misuse before anything touches the server.
func checkSteps(steps []Step) error {
	for i, s := range steps {
		switch {
		case s.Func != nil && s.SQL != "":
			return blame.Userf("step %d (%q) sets both SQL and Func: set one", i, s.Name)
		case s.Func != nil && s.Name == "":
			return blame.Userf("step %d is a Func without a Name: name it, the template is keyed by it", i)
		}
	}
	return nil
}

// hashSteps is the template's content hash: SQL steps by their text, Func
// steps by their Name and Key (a func's code cannot be hashed).
func hashSteps(steps []Step) string {
	h := sha256.New()
	put := func(kind byte, s string) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(s)))
		h.Write([]byte{kind})
		h.Write(n[:])
		h.Write([]byte(s))
	}
	for _, s := range steps {
		if s.Func != nil {
			put('f', s.Name)
			put('k', s.Key)
		} else {
			put('s', s.SQL)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// runStep applies one step to the template database.
func runStep(ctx context.Context, conn *pgx.Conn, s Step) error {
	name := s.Name
	if name == "" {
		name = "SQL"
	}
	if s.Func != nil {
		if err := s.Func(ctx, conn); err != nil {
			return blame.Userf("setup step %s failed: %w", name, err)
		}
		return nil
	}
	results, err := conn.PgConn().Exec(ctx, s.SQL).ReadAll()
	if err != nil {
		// The statements before the failing one each completed a result;
		// one that failed while returning rows has its own, with the error.
		failed := len(results)
		if failed > 0 && results[failed-1].Err != nil {
			failed--
		}
		return stepError(name, s.Layout, s.SQL, failed, err)
	}
	return nil
}

// stepError names the step and, when the server gave a position, the
// line:column it points at in the step's text; without one, the lines of
// the failing statement, the failed-th (from 0) of the text.
func stepError(name, layout, sql string, failed int, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		if layout != "" {
			name += " (" + layout + ")"
		}
		return blame.Userf("setup step %s failed: %w", name, err)
	}
	where := name
	if pgErr.Position > 0 {
		line, col := lineCol(sql, int(pgErr.Position))
		where = fmt.Sprintf("%s:%d:%d", name, line, col)
	} else if spans, ok := statementSpans(sql); ok && failed < len(spans) {
		if sp := spans[failed]; sp.first == sp.last {
			where = fmt.Sprintf("%s, the statement on line %d", name, sp.first)
		} else {
			where = fmt.Sprintf("%s, the statement on lines %d-%d", name, sp.first, sp.last)
		}
	}
	if layout != "" {
		where += " (" + layout + ")"
	}
	msg := fmt.Sprintf("%s: %s (SQLSTATE %s)", pgErr.Severity, pgErr.Message, pgErr.Code)
	if pgErr.Detail != "" {
		msg += "; DETAIL: " + pgErr.Detail
	}
	if pgErr.Where != "" {
		msg += "; CONTEXT: " + pgErr.Where
	}
	return &wrapped{msg: fmt.Sprintf("setup step failed: %s: %s; fix the schema/fixture SQL and run again", where, msg), err: err}
}

// wrapped says msg and unwraps to err, so callers can still reach the
// *pgconn.PgError without the message repeating it.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

// lineCol turns the server's 1-based character position into a 1-based line
// and column (both counted in characters, as the server counts).
func lineCol(s string, pos int) (line, col int) {
	line, col = 1, 1
	for i := 0; i < len(s) && pos > 1; {
		r, size := utf8.DecodeRuneInString(s[i:])
		i += size
		pos--
		if r == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}
