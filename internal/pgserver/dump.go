package pgserver

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
)

// Outlives reports whether the server outlives the test binary: only a
// ModeURL server does; a local cluster or a container is stopped with it,
// and the databases on it with them.
func (s *Server) Outlives() bool { return s.mode == ModeURL }

// Dump writes database to file as plain SQL, without owners or grants, so
// it restores into any server with psql -f once this one is gone. It runs
// pg_dump from the local cluster's installation, else from the highest
// installed version or PATH; a pg_dump older than the server refuses, and
// Dump says so.
func (s *Server) Dump(ctx context.Context, database, file string) error {
	bin, err := s.pgDump()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return fmt.Errorf("[twice] internal: dumping database %s: %w", database, err)
	}
	tmp := file + ".part"
	cmd := exec.CommandContext(ctx, bin, "--no-owner", "--no-privileges", "-f", tmp, "-d", s.ConnString(database))
	if out, err := cmd.CombinedOutput(); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("[twice] dumping database %s with %s failed: %w\n%s", database, bin, err, tail(out, 2000))
	}
	if err := os.Rename(tmp, file); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("[twice] internal: dumping database %s: %w", database, err)
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
		return "", errors.New("[twice] no pg_dump found next to the PostgreSQL server binaries or on PATH (apt-get install postgresql-client)")
	}
	return p, nil
}
