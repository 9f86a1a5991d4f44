// Package record is the file envelope between a check and the twice
// runner: harness.Check writes its result.Result as a Record into
// $TWICE_REPORT_DIR, and cmd/twice reads it back. The result values are
// declared, with their documentation, in harness/result; this package
// holds only the envelope, its environment variables and the files.
//
// The package imports neither harness nor any PostgreSQL provider, so the
// runner that reads records links neither.
package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/runtwice/twice/harness/result"
)

// DirEnv names the directory where Check writes each result for the
// twice runner (cmd/twice sets it); unset, nothing is written.
const DirEnv = "TWICE_REPORT_DIR"

// ReplayEnv holds the schedule, in its text form, that twice replay asks
// a check to run instead of its faults (harness.ReplayEnv).
const ReplayEnv = "TWICE_REPLAY"

// ShardEnv holds the shard a test binary runs, "i/n" (harness's
// -twice.shard flag; twice report -shard sets it for the tests).
const ShardEnv = "TWICE_SHARD"

// Version is the version of the Record format. 2: typed schedules,
// steps, problems and the check's status. 3: the result package's
// values: each step a delivery took with its fate, the report's status
// words.
const Version = 3

// Record is what Check writes for the runner: one file per check, JSON.
type Record struct {
	Version int `json:"version"`
	// Dir is the test's package directory (go test runs tests there).
	Dir string `json:"dir"`
	// Test is the test's name, as go test -run matches it.
	Test string `json:"test"`
	// Rerun is the command that reruns the test.
	Rerun string `json:"rerun"`
	// Written is when the record was written.
	Written time.Time `json:"written"`
	// Error is what ended a check whose Result.Outcome is
	// OutcomeInternalError or OutcomeUserError, as blame.Text says it: the
	// label of whose fault it is and the error, without the tag, which
	// the runner adds where it quotes it.
	Error string `json:"error,omitempty"`
	// Result is the check's result; with an internal error it holds only
	// the job's name and the outcome. Nil in a record of Coverage.
	Result *result.Result `json:"result"`
	// Coverage is what harness.CheckRegistered found of a service's
	// registered workers; a record holds it or a Result.
	Coverage *result.Coverage `json:"coverage,omitempty"`
}

var (
	unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)
	seq        atomic.Int64 // tells apart records of one test (-count, several checks)
)

// SafeName makes name usable as one file name.
func SafeName(name string) string { return unsafeName.ReplaceAllString(name, "_") }

// Write writes rec to $TWICE_REPORT_DIR when it is set, filling Version,
// Dir and Written. It writes to a temporary name and renames, so the
// runner never reads half a record.
func Write(rec Record) error {
	dir := os.Getenv(DirEnv)
	if dir == "" {
		return nil
	}
	wd, _ := os.Getwd()
	rec.Version, rec.Dir, rec.Written = Version, wd, time.Now()
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the result of %s for the runner: %w", rec.Test, err)
	}
	f, err := os.CreateTemp(dir, ".record-*")
	if err != nil {
		return fmt.Errorf("writing the result of %s for the runner (%s=%s): %w", rec.Test, DirEnv, dir, err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	name := filepath.Join(dir, fmt.Sprintf("%s-%d-%d-%s.json", SafeName(filepath.Base(wd)), os.Getpid(), seq.Add(1), SafeName(rec.Test)))
	err = errors.Join(werr, cerr)
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("writing the result of %s for the runner: %w", rec.Test, err)
	}
	return nil
}

// Read reads the records in dir, oldest first. Temporary files (a record
// being written) start with a dot. A file that is not a record of this
// version is an error; ReadAll reads the others.
func Read(dir string) ([]Record, error) {
	recs, bad, err := ReadAll(dir)
	if err != nil {
		return nil, err
	}
	if len(bad) > 0 {
		return nil, bad[0].Err
	}
	return recs, nil
}

// Unreadable is a file of the records directory that is not a record
// twice can read: one check's result, lost, among others that stand.
type Unreadable struct {
	// File is the file's name.
	File string
	// Dir and Test are the check's package directory and test, as far
	// as the file says them; empty when it does not.
	Dir, Test string
	// Err says what is wrong; it is twice's own error (blame.KindInternal).
	Err error
}

// ReadAll reads the records in dir, oldest first, and returns apart the
// files it could not read, so one check's unreadable result costs only
// that check; err is for the directory itself.
func ReadAll(dir string) (recs []Record, bad []Unreadable, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the harness results in %s: %w", dir, err)
	}
	for _, e := range entries {
		if e.IsDir() || strings.HasPrefix(e.Name(), ".") || !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		rec, err := readOne(filepath.Join(dir, e.Name()))
		if err != nil {
			u := Unreadable{File: e.Name(), Err: err}
			if data, rerr := os.ReadFile(filepath.Join(dir, e.Name())); rerr == nil {
				var where struct {
					Dir  string `json:"dir"`
					Test string `json:"test"`
				}
				_ = json.Unmarshal(data, &where)
				u.Dir, u.Test = where.Dir, where.Test
			}
			bad = append(bad, u)
			continue
		}
		recs = append(recs, rec)
	}
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Written.Before(recs[j].Written) })
	return recs, bad, nil
}

func readOne(path string) (Record, error) {
	name := filepath.Base(path)
	data, err := os.ReadFile(path)
	if err != nil {
		return Record{}, fmt.Errorf("reading harness result %s: %w", name, err)
	}
	var head struct {
		Version int `json:"version"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return Record{}, fmt.Errorf("harness result %s is not a record: %w", name, err)
	}
	if head.Version != Version {
		return Record{}, fmt.Errorf("harness result %s has record version %d, this twice reads %d: build twice from the same module version as the tests", name, head.Version, Version)
	}
	var rec Record
	if err := json.Unmarshal(data, &rec); err != nil {
		return Record{}, fmt.Errorf("harness result %s is not a record: %w", name, err)
	}
	if rec.Result == nil && rec.Coverage == nil {
		return Record{}, fmt.Errorf("harness result %s holds no result", name)
	}
	return rec, nil
}
