// Command pgimage is the entrypoint of the CI's PostgreSQL image
// (twice-postgres:ci, built by .ci/build-pg-image.sh from this machine's
// PostgreSQL 15, because CI has no registry to pull an official image from).
//
// It behaves like the official image's docker-entrypoint.sh for what
// testcontainers-go's postgres module uses: POSTGRES_USER,
// POSTGRES_PASSWORD, POSTGRES_DB, POSTGRES_HOST_AUTH_METHOD and
// POSTGRES_INITDB_ARGS are honoured; with "postgres" (or only flags) as
// command it initialises PGDATA if empty and runs the server on
// 0.0.0.0:5432 with password authentication for TCP clients. Any other
// command is executed as given.
//
// It is static (CGO_ENABLED=0) so the image needs no libc of its own for it.
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

const (
	binDir     = "/usr/lib/postgresql/15/bin"
	defaultDir = "/var/lib/postgresql/data"
	uid, gid   = 999, 999 // the postgres user of the image's /etc/passwd
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "[twice] pgimage:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		args = []string{"postgres"}
	}
	if strings.HasPrefix(args[0], "-") {
		args = append([]string{"postgres"}, args...)
	}
	if args[0] != "postgres" {
		path, err := exec.LookPath(args[0])
		if err != nil {
			return err
		}
		return syscall.Exec(path, args, os.Environ())
	}

	pgdata := env("PGDATA", defaultDir)
	if os.Getuid() == 0 {
		for _, dir := range []string{pgdata, "/var/run/postgresql", "/tmp"} {
			if err := os.MkdirAll(dir, 0o700); err != nil {
				return err
			}
			if err := os.Chown(dir, uid, gid); err != nil {
				return err
			}
		}
		if err := os.Chmod("/tmp", 0o1777); err != nil {
			return err
		}
		// Drop to postgres for good: initdb and postgres refuse root.
		if err := syscall.Setgroups([]int{gid}); err != nil {
			return err
		}
		if err := syscall.Setgid(gid); err != nil {
			return err
		}
		if err := syscall.Setuid(uid); err != nil {
			return err
		}
	}
	if _, err := os.Stat(filepath.Join(pgdata, "PG_VERSION")); os.IsNotExist(err) {
		if err := initialise(pgdata); err != nil {
			return err
		}
	}
	environ := append(os.Environ(), "PGDATA="+pgdata)
	return syscall.Exec(filepath.Join(binDir, "postgres"), args, environ)
}

// initialise makes a new cluster in pgdata the way the official image
// does, but creates POSTGRES_DB in single-user mode instead of through a
// temporary server, so the server starts only once.
func initialise(pgdata string) error {
	user := env("POSTGRES_USER", "postgres")
	password := os.Getenv("POSTGRES_PASSWORD")
	db := env("POSTGRES_DB", user)
	hostAuth := env("POSTGRES_HOST_AUTH_METHOD", "scram-sha-256")
	if password == "" && hostAuth != "trust" {
		return fmt.Errorf("POSTGRES_PASSWORD is empty: set it, or POSTGRES_HOST_AUTH_METHOD=trust to allow every TCP client in")
	}

	initdbArgs := []string{"-D", pgdata, "-U", user, "--no-sync", "-E", "UTF8", "--locale=C", "--auth-local=trust", "--auth-host=" + hostAuth}
	if password != "" {
		pwfile := filepath.Join(os.TempDir(), "pgimage-pwfile")
		if err := os.WriteFile(pwfile, []byte(password+"\n"), 0o600); err != nil {
			return err
		}
		defer os.Remove(pwfile)
		initdbArgs = append(initdbArgs, "--pwfile="+pwfile)
	}
	initdbArgs = append(initdbArgs, strings.Fields(os.Getenv("POSTGRES_INITDB_ARGS"))...)
	initdb := exec.Command(filepath.Join(binDir, "initdb"), initdbArgs...)
	initdb.Stdout, initdb.Stderr = os.Stdout, os.Stderr
	if err := initdb.Run(); err != nil {
		return fmt.Errorf("initdb: %w", err)
	}

	if err := appendFile(filepath.Join(pgdata, "pg_hba.conf"), "host all all all "+hostAuth+"\n"); err != nil {
		return err
	}
	if err := appendFile(filepath.Join(pgdata, "postgresql.conf"), "listen_addresses = '*'\nport = 5432\n"); err != nil {
		return err
	}

	if db != "postgres" {
		single := exec.Command(filepath.Join(binDir, "postgres"), "--single", "-D", pgdata, "postgres")
		single.Stdin = strings.NewReader(fmt.Sprintf("CREATE DATABASE %s OWNER %s;\n", quoteIdent(db), quoteIdent(user)))
		var out bytes.Buffer
		single.Stdout, single.Stderr = &out, &out
		if err := single.Run(); err != nil || strings.Contains(out.String(), "ERROR") {
			return fmt.Errorf("create database %q: %v\n%s", db, err, out.String())
		}
	}
	fmt.Println("pgimage: initialised", pgdata)
	return nil
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(text); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
