package freshdb

import (
	"cmp"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/runtwice/twice/internal/blame"
)

// Migration layouts FromFS recognises, as named in errors.
const (
	layoutPlain         = "plain SQL"
	layoutGolangMigrate = "golang-migrate"
	layoutGoose         = "goose"
	layoutTern          = "tern"
	layoutDbmate        = "dbmate"
	layoutSQLMigrate    = "sql-migrate"
)

var (
	// golang-migrate: {version}_{title}.up.sql and .down.sql.
	golangMigrateName = regexp.MustCompile(`^([0-9]+)_(.*)\.(up|down)\.sql$`)
	// goose, tern and dbmate: {version}_{name}.sql.
	versionedName = regexp.MustCompile(`^([0-9]+)_.*\.sql$`)
	// sql-migrate: any name; a leading number is its version.
	leadingNumber = regexp.MustCompile(`^([0-9]+)`)
	// goose Go migrations: {version}_{name}.go.
	gooseGoName = regexp.MustCompile(`^[0-9]+_.*\.go$`)
)

// migrationFile is one *.sql file of a migrations directory, classified.
type migrationFile struct {
	name    string // base name
	text    string
	layout  string // the layout its name or content marks; layoutPlain if none
	marker  string // what marked it, for errors
	version string // numeric prefix without leading zeros; "" if none
	down    bool   // a golang-migrate .down.sql
}

// FromFS reads the *.sql files directly in dir of fsys (not its
// subdirectories) as migrations, one step per file, the way the tool whose
// layout the directory uses would apply them "up":
//
//   - golang-migrate ({version}_{title}.up.sql / .down.sql): the .up.sql
//     files in numeric version order; .down.sql files are never applied.
//   - goose (files with a "-- +goose Up" annotation): the Up section of each
//     file (up to "-- +goose Down"), in numeric version order; a file marked
//     "-- +goose NO TRANSACTION" one statement per step, split as goose
//     splits them (StatementBegin/End groups).
//   - dbmate (files with "-- migrate:up"): the up block of each file (up to
//     "-- migrate:down"), in name order.
//   - sql-migrate (files with "-- +migrate Up"): the Up sections of each
//     file, in sql-migrate's order (numbered names by number, then the
//     others by name); "-- +migrate Up notransaction" one statement per
//     step, split as sql-migrate splits them (StatementBegin/End groups).
//   - tern (some file holds "---- create above / drop below ----"): what is
//     above that line (a file without it whole), in numeric order.
//   - plain: every file whole, in lexical order of the names: zero-pad
//     numbered names ("002_orders.sql" before "010_refunds.sql").
//
// The layout is detected per directory; a directory mixing layouts is an
// error that names two files of different layouts, as is a directory
// without *.sql files, or two files with the same version. So is what
// twice cannot apply as its tool would: goose Go migrations
// ({version}_{name}.go) and tern's text/template actions ({{ template
// ... }}); the error says how to run them with the tool itself. Each step is
// named path.Join(dir, name) and carries its layout, which errors show. The
// lines left out (down sections) are blanked, not removed, so line numbers
// in errors are the file's.
func FromFS(fsys fs.FS, dir string) ([]Step, error) {
	entries, err := fs.ReadDir(fsys, dir) // sorted by name
	if err != nil {
		return nil, blame.Userf("cannot read migrations: %w", err)
	}
	var files []migrationFile
	var goFiles []string
	for _, e := range entries {
		if !e.IsDir() && gooseGoName.MatchString(e.Name()) && !strings.HasSuffix(e.Name(), "_test.go") {
			goFiles = append(goFiles, e.Name())
		}
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".sql") {
			continue
		}
		b, err := fs.ReadFile(fsys, path.Join(dir, e.Name()))
		if err != nil {
			return nil, blame.Userf("cannot read migration: %w", err)
		}
		files = append(files, classify(e.Name(), string(b)))
	}
	if len(files) == 0 && len(goFiles) > 0 {
		return nil, goMigrationError(dir, goFiles[0])
	}
	if len(files) == 0 {
		return nil, blame.Userf("no *.sql migrations in %q: check the fs.FS and the directory name", dir)
	}
	layout, err := dirLayout(dir, files)
	if err != nil {
		return nil, err
	}
	if layout == layoutGoose && len(goFiles) > 0 {
		return nil, goMigrationError(dir, goFiles[0])
	}
	if layout == layoutTern || layout == layoutPlain {
		if err := templateError(dir, layout, files); err != nil {
			return nil, err
		}
	}
	var steps []Step
	switch layout {
	case layoutPlain:
		for _, f := range files {
			steps = append(steps, Step{Name: path.Join(dir, f.name), SQL: f.text, Layout: layoutPlain + ", name order"})
		}
		return steps, nil
	case layoutDbmate:
		// dbmate applies its files in name order.
	case layoutSQLMigrate:
		sortSQLMigrate(files)
	default:
		if err := sortByVersion(dir, layout, files); err != nil {
			return nil, err
		}
	}
	for _, f := range files {
		s := Step{Name: path.Join(dir, f.name)}
		switch layout {
		case layoutGolangMigrate:
			if f.down {
				continue
			}
			s.SQL, s.Layout = f.text, "golang-migrate up file"
		case layoutGoose:
			up := gooseUp(f.text)
			if hasLine(f.text, isGoose("no transaction")) {
				// goose runs these statements one by one, outside a
				// transaction (CREATE INDEX CONCURRENTLY); one round trip
				// would make them one implicit transaction.
				for _, stmt := range splitStatements(up, isGoose("statementbegin"), isGoose("statementend")) {
					steps = append(steps, Step{Name: s.Name, SQL: stmt, Layout: "goose Up section, NO TRANSACTION"})
				}
				continue
			}
			s.SQL, s.Layout = up, "goose Up section"
		case layoutDbmate:
			s.SQL, s.Layout = between(f.text, isDbmate("up"), isDbmate("down")), "dbmate migrate:up block"
		case layoutSQLMigrate:
			up, noTx := sqlMigrateUp(f.text)
			if noTx {
				// sql-migrate runs these one by one outside a transaction.
				for _, stmt := range splitStatements(up, isSQLMigrate("statementbegin"), isSQLMigrate("statementend")) {
					steps = append(steps, Step{Name: s.Name, SQL: stmt, Layout: "sql-migrate Up section, notransaction"})
				}
				continue
			}
			s.SQL, s.Layout = up, "sql-migrate Up section"
		case layoutTern:
			s.SQL, s.Layout = between(f.text, nil, isTernSplit), "tern, above create/drop"
		}
		steps = append(steps, s)
	}
	if len(steps) == 0 {
		return nil, blame.Userf("no up migrations in %q (%s layout): only .down.sql files", dir, layout)
	}
	return steps, nil
}

// classify says which layout a file's name or content marks.
func classify(name, text string) migrationFile {
	f := migrationFile{name: name, text: text, layout: layoutPlain}
	if m := golangMigrateName.FindStringSubmatch(name); m != nil {
		f.layout, f.marker, f.version, f.down = layoutGolangMigrate, "."+m[3]+".sql name", trimZeros(m[1]), m[3] == "down"
		return f
	}
	if m := versionedName.FindStringSubmatch(name); m != nil {
		f.version = trimZeros(m[1])
	}
	for line := range strings.Lines(text) {
		switch {
		case isGoose("up")(line):
			f.layout, f.marker = layoutGoose, "-- +goose Up"
		case isDbmate("up")(line):
			f.layout, f.marker = layoutDbmate, "-- migrate:up"
		case isSQLMigrate("up")(line):
			f.layout, f.marker = layoutSQLMigrate, "-- +migrate Up"
		case isTernSplit(line):
			f.layout, f.marker = layoutTern, "---- create above / drop below ----"
		default:
			continue
		}
		break
	}
	return f
}

// dirLayout is the one layout of a directory's files. tern files may go
// without a marker (a migration without a down part); in every other
// layout each file carries its tool's name or annotation.
func dirLayout(dir string, files []migrationFile) (string, error) {
	var marked *migrationFile
	for i := range files {
		f := &files[i]
		if f.layout == layoutPlain {
			continue
		}
		if marked != nil && f.layout != marked.layout {
			return "", mixError(dir, marked, f)
		}
		marked = f
	}
	if marked == nil {
		return layoutPlain, nil
	}
	for i := range files {
		f := &files[i]
		switch {
		case f.layout != layoutPlain:
		case marked.layout != layoutTern:
			return "", mixError(dir, marked, f)
		case f.version == "":
			return "", blame.Userf("migrations in %q: %s is not named {version}_{name}.sql as tern needs (%s marks the directory as tern's)", dir, f.name, marked.name)
		}
	}
	return marked.layout, nil
}

func mixError(dir string, a, b *migrationFile) error {
	say := func(f *migrationFile) string {
		if f.layout == layoutPlain {
			return fmt.Sprintf("%s has no migration tool's marker (plain SQL)", f.name)
		}
		return fmt.Sprintf("%s is %s (%s)", f.name, f.layout, f.marker)
	}
	return blame.Userf("migrations in %q mix layouts: %s, but %s; keep one tool's migrations per directory", dir, say(a), say(b))
}

// sortByVersion orders files by their numeric version, as golang-migrate,
// goose and tern do ("2_x" before "10_x"); a file without a version or two
// files with one version (the up and down of golang-migrate aside) are
// errors.
func sortByVersion(dir, layout string, files []migrationFile) error {
	for _, f := range files {
		if f.version == "" {
			return blame.Userf("migrations in %q (%s layout): %s does not start with a numeric version and an underscore", dir, layout, f.name)
		}
	}
	slices.SortStableFunc(files, func(a, b migrationFile) int {
		return cmp.Or(cmp.Compare(len(a.version), len(b.version)), strings.Compare(a.version, b.version))
	})
	seen := map[string]string{}
	for _, f := range files {
		key := f.version
		if f.down {
			key += " down"
		}
		if other, ok := seen[key]; ok {
			return blame.Userf("migrations in %q (%s layout): %s and %s have the same version %s", dir, layout, other, f.name, versionOrZero(f.version))
		}
		seen[key] = f.name
	}
	return nil
}

func trimZeros(v string) string { return strings.TrimLeft(v, "0") }

func versionOrZero(v string) string {
	if v == "" {
		return "0"
	}
	return v
}

// annotation is the command of an SQL comment line "-- <prefix>cmd", or
// ok == false.
func annotation(line, prefix string) (cmd string, ok bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), "--")
	if !ok {
		return "", false
	}
	return strings.CutPrefix(strings.TrimSpace(rest), prefix)
}

// isGoose matches goose's "-- +goose <cmd>" lines (goose reads them case
// insensitively).
func isGoose(cmd string) func(string) bool {
	return func(line string) bool {
		c, ok := annotation(line, "+goose")
		return ok && strings.EqualFold(strings.TrimSpace(c), cmd)
	}
}

// isDbmate matches dbmate's "-- migrate:<cmd>" lines, options after it
// (transaction:false) allowed.
func isDbmate(cmd string) func(string) bool {
	return func(line string) bool {
		c, ok := annotation(line, "migrate:"+cmd)
		return ok && (c == "" || c[0] == ' ' || c[0] == '\t')
	}
}

func isTernSplit(line string) bool {
	return strings.TrimSpace(line) == "---- create above / drop below ----"
}

// gooseUp is the Up section of a goose file. "-- +goose StatementBegin/End"
// are comments to the server: the section goes in one round trip, so a
// function body needs no grouping.
func gooseUp(text string) string {
	return between(text, isGoose("up"), isGoose("down"))
}

// between keeps the lines after the first line start matches (from the
// top when start is nil) up to the first line end matches, and blanks the
// others, so positions keep their line numbers.
func between(text string, start, end func(string) bool) string {
	var b strings.Builder
	in, done := start == nil, false
	for line := range strings.Lines(text) {
		switch {
		case !done && !in && start(line):
			in = true
		case in && end(line):
			in, done = false, true
		case in:
			b.WriteString(line)
			continue
		}
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func hasLine(text string, match func(string) bool) bool {
	for line := range strings.Lines(text) {
		if match(line) {
			return true
		}
	}
	return false
}

// splitStatements splits an Up section as goose and sql-migrate do: a
// statement ends on a line ending in ";" (a trailing "--" comment aside),
// except between the tool's StatementBegin and StatementEnd lines, which
// make one statement. Each statement keeps the lines before it blank, so
// positions keep the file's line numbers.
func splitStatements(up string, begin, end func(string) bool) []string {
	var stmts []string
	var cur, blank strings.Builder
	inBlock, has := false, false
	flush := func() {
		if has {
			stmts = append(stmts, blank.String()+cur.String())
		}
		for range strings.Count(cur.String(), "\n") {
			blank.WriteByte('\n')
		}
		cur.Reset()
		has = false
	}
	for line := range strings.Lines(up) {
		switch {
		case begin(line):
			flush()
			inBlock = true
			cur.WriteString(line)
			continue
		case end(line):
			cur.WriteString(line)
			inBlock = false
			flush()
			continue
		}
		cur.WriteString(line)
		code := line
		if i := strings.Index(code, "--"); i >= 0 {
			code = code[:i]
		}
		code = strings.TrimSpace(code)
		if code != "" {
			has = true
		}
		if !inBlock && strings.HasSuffix(code, ";") {
			flush()
		}
	}
	flush()
	return stmts
}

// isSQLMigrate matches sql-migrate's "-- +migrate <cmd> [options]" lines.
func isSQLMigrate(cmd string) func(string) bool {
	return func(line string) bool {
		c, ok := annotation(line, "+migrate")
		fields := strings.Fields(c)
		return ok && len(fields) > 0 && strings.EqualFold(fields[0], cmd)
	}
}

// sqlMigrateUp is what sql-migrate applies up from a file: the lines of
// its Up sections (a file may have Down first, or several of each), the
// rest blanked so positions keep their line numbers; and whether an Up
// line says notransaction.
func sqlMigrateUp(text string) (up string, noTx bool) {
	var b strings.Builder
	in := false
	for line := range strings.Lines(text) {
		switch {
		case isSQLMigrate("up")(line):
			in = true
			c, _ := annotation(line, "+migrate")
			noTx = noTx || slices.Contains(strings.Fields(c)[1:], "notransaction")
		case isSQLMigrate("down")(line):
			in = false
		case in:
			b.WriteString(line)
			continue
		}
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String(), noTx
}

// sortSQLMigrate orders files as sql-migrate does: names with a leading
// number by that number, before the others, which go by name.
func sortSQLMigrate(files []migrationFile) {
	num := func(f migrationFile) string { return trimZeros(leadingNumber.FindString(f.name)) }
	slices.SortStableFunc(files, func(a, b migrationFile) int {
		na, nb := leadingNumber.MatchString(a.name), leadingNumber.MatchString(b.name)
		switch {
		case na && nb:
			va, vb := num(a), num(b)
			if c := cmp.Or(cmp.Compare(len(va), len(vb)), strings.Compare(va, vb)); c != 0 {
				return c
			}
		case na:
			return -1
		case nb:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
}

// goMigrationError says a goose directory holds Go migrations, which only
// goose can run: they are funcs the package registers in init.
func goMigrationError(dir, name string) error {
	return blame.Userf("migrations in %q (goose layout): %s is a Go migration, which goose runs from the func it registers and twice cannot run from the directory; run the directory with goose's own provider in a harness.FuncDB setup (sqlDB, _ := db.SQL(); p, _ := goose.NewProvider(goose.DialectPostgres, sqlDB, migrationsFS); _, err := p.Up(ctx))", dir, name)
}

// templateError refuses a tern (or unmarked) file with a text/template
// action: tern runs every migration through text/template (shared files
// included with {{ template "..." }}), and the raw text would reach the
// server.
func templateError(dir, layout string, files []migrationFile) error {
	for _, f := range files {
		n := 0
		for line := range strings.Lines(f.text) {
			n++
			i := strings.Index(line, "{{")
			if i < 0 {
				continue
			}
			action := line[i:]
			if j := strings.Index(action, "}}"); j >= 0 {
				action = action[:j+2]
			}
			if layout == layoutPlain && !strings.HasPrefix(strings.TrimSpace(strings.TrimPrefix(action, "{{")), "template") {
				continue // a plain file's "{{" may be data; only an include is surely tern's
			}
			return blame.Userf("migrations in %q (%s layout): %s:%d holds a template action (%s), which tern expands before it runs the file and twice does not; run the directory with tern's own migrator in a harness.FuncDB setup (m, _ := migrate.NewMigrator(ctx, db.Conn(), \"public.schema_version\"); m.LoadMigrations(migrationsFS); err := m.Migrate(ctx))", dir, layout, f.name, n, strings.TrimSpace(action))
		}
	}
	return nil
}
