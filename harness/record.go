package harness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
	"time"
)

// ReportDirEnv names the directory where Check writes each result for the
// twice runner (cmd/twice sets it); unset, nothing is written.
const ReportDirEnv = "TWICE_REPORT_DIR"

// RecordVersion is the version of the Record format.
const RecordVersion = 1

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
	// Result is the check's result.
	Result *Result `json:"result"`
}

var (
	unsafeName = regexp.MustCompile(`[^A-Za-z0-9_.-]+`)
	recordSeq  atomic.Int64 // tells apart records of one test (-count, several checks)
)

// writeRecord writes res to $TWICE_REPORT_DIR when it is set. It writes to a
// temporary name and renames, so the runner never reads half a record.
func writeRecord(testName, rerun string, res *Result) error {
	dir := os.Getenv(ReportDirEnv)
	if dir == "" {
		return nil
	}
	wd, _ := os.Getwd()
	rec := Record{Version: RecordVersion, Dir: wd, Test: testName, Rerun: rerun, Written: time.Now(), Result: res}
	data, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("[twice] internal: encoding the result of %s for the runner: %w", testName, err)
	}
	f, err := os.CreateTemp(dir, ".record-*")
	if err != nil {
		return fmt.Errorf("[twice] internal: writing the result of %s for the runner (%s=%s): %w", testName, ReportDirEnv, dir, err)
	}
	_, werr := f.Write(data)
	cerr := f.Close()
	name := filepath.Join(dir, fmt.Sprintf("%s-%d-%d-%s.json", unsafeName.ReplaceAllString(filepath.Base(wd), "_"), os.Getpid(), recordSeq.Add(1), unsafeName.ReplaceAllString(testName, "_")))
	err = errors.Join(werr, cerr)
	if err == nil {
		err = os.Rename(f.Name(), name)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("[twice] internal: writing the result of %s for the runner: %w", testName, err)
	}
	return nil
}
