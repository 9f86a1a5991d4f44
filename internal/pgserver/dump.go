package pgserver

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/runtwice/twice/internal/blame"
)

// dumpTimeout bounds one dump: a server or engine that stopped answering
// must not hang the test's cleanup.
const dumpTimeout = 5 * time.Minute

// Outlives reports whether the server outlives the test binary: only a
// ModeURL server does; a local cluster or a container is stopped with it,
// and the databases on it with them.
func (s *Server) Outlives() bool { return s.mode == ModeURL }

// Dump writes database to file as plain SQL, without owners or grants, so
// it restores into any server with psql -f once this one is gone. The
// tables in skipData (quoted and qualified, as pg_dump's patterns take
// them) are dumped without their rows.
//
// In a container (ModeDocker) it runs the image's own pg_dump inside the
// container and reads the dump from its output: that pg_dump has the
// server's version, where the host's may be older and refuse (pg_dump
// dumps no server newer than itself), or be missing. Otherwise it runs
// pg_dump from the local cluster's installation, else from the highest
// installed version or PATH. Every failure is an error that says which
// pg_dump failed and what it printed; file is then left as it was.
func (s *Server) Dump(ctx context.Context, database, file string, skipData ...string) error {
	ctx, cancel := context.WithTimeout(ctx, dumpTimeout)
	defer cancel()
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("dumping database %s: %w", database, err)
	}
	tmp := file + ".part"
	var err error
	if s.mode == ModeDocker {
		err = s.dumpInContainer(ctx, database, tmp, skipData)
	} else {
		err = s.dumpOnHost(ctx, database, tmp, skipData)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, file); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("dumping database %s: %w", database, err)
	}
	return nil
}

// pgDumpArgs are pg_dump's flags for a dump that restores anywhere,
// without the rows of the tables in skipData.
func pgDumpArgs(skipData []string) []string {
	args := []string{"--no-owner", "--no-privileges"}
	for _, t := range skipData {
		args = append(args, "--exclude-table-data="+t)
	}
	return args
}

func (s *Server) dumpOnHost(ctx context.Context, database, tmp string, skipData []string) error {
	bin, err := s.pgDump()
	if err != nil {
		return err
	}
	args := append(pgDumpArgs(skipData), "-f", tmp, "-d", s.ConnString(database))
	cmd := exec.CommandContext(ctx, bin, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return blame.Userf("dumping database %s with %s failed: %w\n%s", database, bin, err, tail(out, 2000))
	}
	return nil
}

// pgDump finds pg_dump: next to the server binaries this process runs,
// else where findBinaries looks, else on PATH.
func (s *Server) pgDump() (string, error) {
	if s.local != nil && s.local.bin != "" {
		if p := filepath.Join(s.local.bin, "pg_dump"); isExecutable(p) {
			return p, nil
		}
	}
	if b, err := findBinaries(); err == nil {
		if p := filepath.Join(b.dir, "pg_dump"); isExecutable(p) {
			return p, nil
		}
	}
	p, err := exec.LookPath("pg_dump")
	if err != nil {
		return "", blame.Userf("no pg_dump found next to the PostgreSQL server binaries or on PATH (apt-get install postgresql-client)")
	}
	return p, nil
}
