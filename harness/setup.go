package harness

import (
	"context"
	"errors"
	"io/fs"
	"reflect"
	"runtime"

	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/freshdb"
)

// Setup is part of the schema and fixtures every scenario's database starts
// from. The harness applies a job's setups in order once, into a template
// database, and clones it for every scenario.
type Setup struct {
	steps []freshdb.Step
	err   error
}

// SQL is schema or fixture SQL, applied as given (it may hold many
// statements).
func SQL(sql string) Setup {
	return Setup{steps: []freshdb.Step{{Name: "SQL", SQL: sql}}}
}

// SQLFiles applies SQL files in the order given.
func SQLFiles(paths ...string) Setup {
	steps, err := freshdb.FromFiles(paths...)
	return Setup{steps: steps, err: err}
}

// Migrations applies the *.sql files of dir in fsys in name order, as a
// migration tool would.
func Migrations(fsys fs.FS, dir string) Setup {
	steps, err := freshdb.FromFS(fsys, dir)
	return Setup{steps: steps, err: err}
}

// Func runs Go code against the template database. Templates are keyed by
// content, and a func's content is its name: change the name when its
// behaviour changes within one test binary.
func Func(fn func(ctx context.Context, conn *pgx.Conn) error) Setup {
	if fn == nil {
		return Setup{err: errors.New("[twice] harness.Func: the setup func is nil")}
	}
	name := runtime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name()
	return Setup{steps: []freshdb.Step{{Name: name, Func: fn}}}
}
