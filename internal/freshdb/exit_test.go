package freshdb_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/jackc/pgx/v5"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/freshdb"
	"github.com/runtwice/twice/internal/pgserver"
)

// helperEnv makes TestHelperURLRun run: it says how the child ends.
const helperEnv = "TWICE_FRESHDB_TEST_HELPER"

// TestNoDatabaseOutlivesTheProcess: a test binary on a shared server
// (TWICE_DATABASE_URL) with no TestMain calling DropAll prepares a template,
// hands out a database, keeps another, and ends, normally or by SIGKILL.
// None of its run's databases is left afterwards; its kept database and a
// foreign one are.
func TestNoDatabaseOutlivesTheProcess(t *testing.T) {
	srv := server(t)
	admin := srv.ConnString("postgres")
	for _, end := range []string{"exit", "sigkill"} {
		t.Run(end, func(t *testing.T) {
			foreign := "app_" + randomHex(t, 8)
			run(t, admin, "CREATE DATABASE "+foreign)
			defer run(t, admin, "DROP DATABASE IF EXISTS "+foreign)

			// The child exits only once its stdin closes: its databases
			// must be seen while it lives, not raced against its exit.
			release, stdin, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			defer release.Close()
			defer stdin.Close()
			child, ready := startURLRun(t, end, admin, release)
			f := strings.Fields(ready)
			if len(f) != 4 {
				t.Fatalf("helper said %q, want <run ID> <kept> <handed out> <template>", ready)
			}
			childID, kept, handedOut, template := f[0], f[1], f[2], f[3]
			defer run(t, admin, "DROP DATABASE IF EXISTS "+kept)
			prefix := "twice_" + childID + "_"
			if childID == freshdb.RunID() {
				t.Fatalf("the helper has this process's run ID %s", childID)
			}
			for _, name := range []string{handedOut, template, kept} {
				if !databaseExists(t, srv, name) {
					t.Fatalf("database %s does not exist while the helper runs", name)
				}
			}
			if !strings.HasPrefix(handedOut, prefix) || !strings.HasPrefix(template, prefix) {
				t.Fatalf("helper's databases %s, %s lack its prefix %s", handedOut, template, prefix)
			}

			if end == "sigkill" {
				if err := child.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
			if err := stdin.Close(); err != nil {
				t.Fatal(err)
			}
			if err := child.Wait(); end == "exit" && err != nil {
				t.Fatalf("helper failed: %v", err)
			}
			deadline := time.Now().Add(2 * time.Minute) // generous: a bound, not a timing assertion
			for {
				left := databasesWithPrefix(t, admin, prefix)
				if len(left) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the helper's run databases %v are still there after it ended", left)
				}
				time.Sleep(20 * time.Millisecond)
			}
			for _, name := range []string{kept, foreign} {
				if !databaseExists(t, srv, name) {
					t.Errorf("database %s was dropped, want it kept", name)
				}
			}
		})
	}
}

// startURLRun runs TestHelperURLRun in a child that reaches the server in
// URL mode, until it prints "READY <what>". The child ends ("exit") once
// its stdin closes.
func startURLRun(t *testing.T, end, url string, stdin *os.File) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperURLRun$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+end, "TWICE_POSTGRES=url", "TWICE_DATABASE_URL="+url)
	cmd.Stdin = stdin
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	sc := bufio.NewScanner(stdout)
	var out strings.Builder
	for sc.Scan() {
		if ready, ok := strings.CutPrefix(sc.Text(), "READY "); ok {
			go func() { // keep the pipe drained
				for sc.Scan() {
				}
			}()
			return cmd, ready
		}
		out.WriteString(sc.Text() + "\n")
	}
	_ = cmd.Wait()
	t.Fatalf("helper ended before it was ready:\n%s%s", out.String(), stderr.String())
	return nil, ""
}

func TestHelperURLRun(t *testing.T) {
	end := os.Getenv(helperEnv)
	if end == "" {
		t.Skip("helper for TestNoDatabaseOutlivesTheProcess")
	}
	ctx := context.Background()
	srv, err := pgserver.Shared(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if srv.Mode() != pgserver.ModeURL {
		t.Fatalf("helper runs in mode %s, want %s", srv.Mode(), pgserver.ModeURL)
	}
	steps := append(slices.Clone(fixture), freshdb.Step{Name: "SQL", SQL: "-- exit test " + randomHex(t, 8)})
	tpl, err := freshdb.Prepare(ctx, srv, steps)
	if err != nil {
		t.Fatal(err)
	}
	handedOut, err := tpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := tpl.Fresh(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := kept.Keep(ctx); err != nil {
		t.Fatal(err)
	}
	// A session still open in a handed-out database (never closed: the
	// process ends with it) must not keep the database alive.
	if _, err := pgx.Connect(ctx, handedOut.ConnString); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("READY %s %s %s %s\n", freshdb.RunID(), kept.Name, handedOut.Name, tpl.Name)
	if end == "sigkill" {
		time.Sleep(time.Hour)
	}
	_, _ = io.Copy(io.Discard, os.Stdin) // the parent has seen the databases
	// "exit": the binary ends without DropAll (see TestMain), as a user's
	// test binary without a TestMain does.
}

// exitServer is a real server whose DropOnExit is recorded and may fail.
type exitServer struct {
	freshdb.Server
	mu    sync.Mutex
	err   error
	calls []string
}

func (s *exitServer) DropOnExit(prefix string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, prefix)
	return s.err
}

// TestDropOnExitBeforeFirstCreate: a run asks a Server with DropOnExit once,
// with its prefix, before it creates anything there, and creates nothing
// when the Server cannot promise the cleanup.
func TestDropOnExitBeforeFirstCreate(t *testing.T) {
	ctx := context.Background()
	inner := server(t)
	admin := inner.ConnString("postgres")
	// End this process's run, so the next one starts on srv.
	if err := freshdb.DropAll(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := freshdb.DropAll(ctx); err != nil {
			t.Error(err)
		}
	})
	srv := &exitServer{Server: inner, err: errors.New("no watchdog today")}
	steps := append(slices.Clone(fixture), freshdb.Step{Name: "SQL", SQL: "-- arm test " + randomHex(t, 8)})

	_, err := freshdb.Prepare(ctx, srv, steps)
	if err == nil || !strings.Contains(err.Error(), "no watchdog today") || !strings.HasPrefix(blame.Message(err), "[twice] internal: ") {
		t.Fatalf("Prepare error = %v, want the Server's DropOnExit error", err)
	}
	if left := databasesWithPrefix(t, admin, freshdb.RunPrefix()); len(left) > 0 {
		t.Errorf("databases %v were created though DropOnExit failed", left)
	}

	srv.mu.Lock()
	srv.err = nil
	srv.mu.Unlock()
	tpl, err := freshdb.Prepare(ctx, srv, steps)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		d, err := tpl.Fresh(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer d.Drop(ctx)
	}
	srv.mu.Lock()
	defer srv.mu.Unlock()
	want := []string{freshdb.RunPrefix(), freshdb.RunPrefix()} // the failed call, then one
	if diff := cmp.Diff(want, srv.calls); diff != "" {
		t.Errorf("DropOnExit calls mismatch (-want +got):\n%s", diff)
	}
}

// A run ended by DropAll and started again at once takes its lock back
// although the server may not yet have ended the old lock session's
// backend (CI's URL pass saw "another live run on this server has run
// ID ..." right after a test's DropAll).
func TestRunRestartsAtOnce(t *testing.T) {
	ctx := context.Background()
	srv := server(t)
	t.Cleanup(func() {
		if err := freshdb.DropAll(ctx); err != nil {
			t.Error(err)
		}
	})
	for range 5 {
		if err := freshdb.DropAll(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := freshdb.Prepare(ctx, srv, fixture); err != nil {
			t.Fatal(err)
		}
	}
}
