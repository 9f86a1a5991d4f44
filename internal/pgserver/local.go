package pgserver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/internal/owner"
)

// cacheFormat changes whenever the cached cluster would differ for the same
// binaries: bump it with initdbArgs.
const cacheFormat = "1"

// initdbArgs make the smallest, fastest cluster: no fsync, C locale (no
// locale files), 1 MB WAL segments (the cache holds one segment, so copies
// are 15 MB shorter), trust auth for the unix socket only it listens on.
var initdbArgs = []string{"-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync", "--no-instructions", "--wal-segsize=1"}

// serverArgs tune a throwaway server for tests: nothing is made durable,
// TCP is off, there is room for ~200 connections, and nothing runs in the
// background that a test did not ask for.
var serverArgs = []string{
	"-c", "listen_addresses=",
	"-c", "fsync=off",
	"-c", "synchronous_commit=off",
	"-c", "full_page_writes=off",
	"-c", "wal_level=minimal",
	"-c", "max_wal_senders=0",
	"-c", "max_wal_size=1GB",
	"-c", "checkpoint_timeout=1h",
	"-c", "max_connections=250",
	"-c", "shared_buffers=128MB",
	"-c", "dynamic_shared_memory_type=mmap", // segments live in the data dir, removed with it
	"-c", "huge_pages=off",
	"-c", "autovacuum=off",
	"-c", "jit=off",
	"-c", "max_parallel_workers_per_gather=0",
	"-c", "TimeZone=UTC",
	"-c", "log_timezone=UTC",
	"-c", "log_min_messages=warning",
	"-c", "logging_collector=off",
}

// runDirPrefix names the directories of local clusters, so a later run can
// find the ones a killed run left.
const runDirPrefix = "twice-pg-"

// localSearchDirs lists where server binaries may be, in addition to PATH;
// tests replace it.
var localSearchDirs = func() []string {
	var dirs []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin"} {
		m, _ := filepath.Glob(pattern)
		dirs = append(dirs, m...)
	}
	return append(filepath.SplitList(os.Getenv("PATH")), dirs...)
}

// binaries is one installation of the server.
type binaries struct {
	dir     string // real directory of initdb and postgres
	version string // as `pg_ctl -V` prints it after "(PostgreSQL) ", e.g. "15.18 (Debian 15.18-0+deb12u1)"
	major   int
	minor   int
}

var versionRE = regexp.MustCompile(`\(PostgreSQL\) ((\d+)(?:\.(\d+))?\S*.*)$`)

// findBinaries returns the highest version of the server found.
func findBinaries() (*binaries, error) {
	seen := map[string]bool{}
	var found []*binaries
	for _, dir := range localSearchDirs() {
		if dir == "" {
			continue
		}
		initdb, err := filepath.EvalSymlinks(filepath.Join(dir, "initdb"))
		if err != nil {
			continue
		}
		real := filepath.Dir(initdb)
		if seen[real] {
			continue
		}
		seen[real] = true
		if !isExecutable(filepath.Join(real, "postgres")) || !isExecutable(initdb) {
			continue
		}
		// pg_ctl answers -V in a few ms; postgres itself loads ~40 libraries first.
		probe := filepath.Join(real, "pg_ctl")
		if !isExecutable(probe) {
			probe = filepath.Join(real, "postgres")
		}
		out, err := exec.Command(probe, "-V").Output()
		if err != nil {
			continue
		}
		m := versionRE.FindStringSubmatch(strings.TrimSpace(string(out)))
		if m == nil {
			continue
		}
		b := &binaries{dir: real, version: m[1]}
		b.major, _ = strconv.Atoi(m[2])
		b.minor, _ = strconv.Atoi(m[3])
		found = append(found, b)
	}
	if len(found) == 0 {
		return nil, unavailable("no initdb and postgres found on PATH or under /usr/lib/postgresql/*/bin")
	}
	sort.SliceStable(found, func(i, j int) bool {
		if found[i].major != found[j].major {
			return found[i].major > found[j].major
		}
		return found[i].minor > found[j].minor
	})
	return found[0], nil
}

func isExecutable(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0
}

// account is who runs initdb and postgres: they refuse to run as root, so
// root hands them to the postgres user, or nobody.
type account struct {
	cred *syscall.Credential // nil: run as this process's user
	uid  int                 // -1: no chown needed
	gid  int
	name string
}

func serverAccount() (account, error) {
	if os.Geteuid() != 0 {
		return account{uid: -1, gid: -1}, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.Atoi(u.Uid)
		gid, err2 := strconv.Atoi(u.Gid)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		return account{
			cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}},
			uid:  uid, gid: gid, name: name,
		}, nil
	}
	return account{}, errors.New("running as root, and initdb and postgres refuse root, but neither a postgres nor a nobody user exists to run them as: create one (useradd --system postgres)")
}

// runBase is where clusters live: tmpfs when there is one, because
// initdb and a copy of the cache create ~1000 files and ext4's inode
// allocation made initdb twice as slow; and a short path, because a unix
// socket's path must fit in ~107 bytes.
func runBase() string {
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() && syscall.Access("/dev/shm", 2 /* W_OK */) == nil {
		return "/dev/shm"
	}
	if tmp := os.TempDir(); len(tmp) < 60 {
		return tmp
	}
	return "/tmp"
}

type localCluster struct {
	runDir  string
	log     string
	cmd     *exec.Cmd
	exited  chan struct{} // closed when postgres has exited and been reaped
	caching chan struct{} // closed when a new cluster is in the cache; nil if none is being stored
	ref     owner.Process
	wd      *watchdog
	bin     string // the server's installation: initdb, postgres, pg_dump
}

func startLocal(ctx context.Context) (*Server, error) {
	bins, err := findBinaries()
	if err != nil {
		return nil, err
	}
	acct, err := serverAccount()
	if err != nil {
		return nil, err
	}
	base := runBase()
	sweepRunDirs(base)

	wd, err := startWatchdog()
	if err != nil {
		return nil, err
	}
	c := &localCluster{wd: wd, bin: bins.dir}
	srv, err := c.start(ctx, bins, acct, base)
	if err != nil {
		_ = c.stop()
		return nil, err
	}
	return srv, nil
}

func (c *localCluster) start(ctx context.Context, bins *binaries, acct account, base string) (*Server, error) {
	runDir, err := os.MkdirTemp(base, runDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("make a directory for the local PostgreSQL cluster in %s: %w", base, err)
	}
	c.runDir = runDir
	if err := c.wd.watchDir(runDir); err != nil {
		return nil, err
	}
	if err := markOwner(runDir); err != nil {
		return nil, err
	}
	if err := chown(runDir, acct); err != nil {
		return nil, err
	}
	data := filepath.Join(runDir, "data")
	c.log = filepath.Join(runDir, "postgres.log")

	key := cacheKey(bins)
	cacheRoot := cacheRootDir()
	cached := filepath.Join(cacheRoot, key)
	fromCache := false
	if _, err := os.Stat(filepath.Join(cached, "PG_VERSION")); err == nil {
		fromCache = true
		if err := copyTree(cached, data, acct); err != nil {
			return nil, fmt.Errorf("copy the cached cluster %s to %s: %w", cached, data, err)
		}
	} else {
		// initdb makes a pristine copy for the cache and one to run; the
		// cache is written while the server starts, because the user cache
		// dir is usually ext4, where creating a cluster's ~1000 files can
		// take longer than initdb itself.
		pristine := filepath.Join(runDir, "pristine")
		if err := runInitdb(ctx, bins, acct, pristine, runDir); err != nil {
			return nil, err
		}
		if err := copyTree(pristine, data, acct); err != nil {
			return nil, fmt.Errorf("copy the new cluster %s to %s: %w", pristine, data, err)
		}
		c.caching = make(chan struct{})
		go func() {
			defer close(c.caching)
			_ = storeCache(pristine, cacheRoot, key) // a cache that cannot be written only costs time
			_ = os.RemoveAll(pristine)
		}()
	}
	if err := os.Chmod(data, 0o700); err != nil {
		return nil, err
	}
	srv, err := c.launch(ctx, bins, acct, data)
	if err != nil && fromCache {
		// A damaged cache must not fail every later run: the next one
		// runs initdb again.
		_ = os.RemoveAll(cached)
	}
	return srv, err
}

func runInitdb(ctx context.Context, bins *binaries, acct account, data, runDir string) error {
	cmd := exec.CommandContext(ctx, filepath.Join(bins.dir, "initdb"), append([]string{"-D", data}, initdbArgs...)...)
	cmd.Env = append(serverEnv(), "TZ=UTC")
	cmd.Dir = runDir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: acct.cred}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("initdb (PostgreSQL %s in %s, as %s) failed: %w\n%s", bins.version, bins.dir, acct, err, tail(out, 2000))
	}
	return nil
}

func (a account) String() string {
	if a.cred == nil {
		return "this user"
	}
	return "user " + a.name
}

// serverEnv is this process's environment without libpq's PG* variables,
// which would otherwise steer initdb and the server.
func serverEnv() []string {
	var env []string
	for _, kv := range filteredEnv() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return env
}

func (c *localCluster) launch(ctx context.Context, bins *binaries, acct account, data string) (*Server, error) {
	logFile, err := os.OpenFile(c.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() { _ = logFile.Close() }()
	if err := chown(c.log, acct); err != nil {
		return nil, err
	}
	args := append([]string{"-D", data, "-k", c.runDir}, serverArgs...)
	cmd := exec.Command(filepath.Join(bins.dir, "postgres"), args...)
	cmd.Env = serverEnv()
	cmd.Dir = c.runDir
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Own process group: a ^C reaches the test binary, whose watchdog then
	// stops the server in order, instead of tearing it down mid-test.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: acct.cred, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	c.cmd = cmd
	c.ref = owner.Of(cmd.Process.Pid)
	c.exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(c.exited)
	}()
	if err := c.wd.watchProc(c.ref); err != nil {
		return nil, err
	}

	base := formatKeywordValue(map[string]string{
		"host": c.runDir, "port": "5432", "user": "postgres", "dbname": "postgres", "sslmode": "disable",
	})
	cfg, err := pgconn.ParseConfig(base)
	if err != nil {
		return nil, err
	}
	version, err := c.waitReady(ctx, cfg, 60*time.Second)
	if err != nil {
		return nil, err
	}
	return &Server{mode: ModeLocal, base: base, version: version, local: c, stop: c.stop}, nil
}

// waitReady connects until the server answers a query, it exits, or the
// deadline passes.
func (c *localCluster) waitReady(ctx context.Context, cfg *pgconn.Config, limit time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	delay := 2 * time.Millisecond
	for {
		version, _, err := probe(ctx, cfg)
		if err == nil {
			return version, nil
		}
		select {
		case <-c.exited:
			return 0, fmt.Errorf("local PostgreSQL exited while starting (%s); its log %s ends:\n%s", c.cmd.ProcessState, c.log, logTail(c.log))
		case <-ctx.Done():
			return 0, fmt.Errorf("local PostgreSQL in %s did not answer within %s (%w); its log %s ends:\n%s", c.runDir, limit, err, c.log, logTail(c.log))
		case <-time.After(delay):
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}

// stop shuts the server down fast, removes its directory and lets the
// watchdog go.
func (c *localCluster) stop() error {
	var errs []error
	if c.cmd != nil {
		stopPostmaster(c.ref, 30*time.Second)
		select {
		case <-c.exited:
		case <-time.After(10 * time.Second):
			errs = append(errs, fmt.Errorf("local PostgreSQL (pid %d) did not exit", c.ref.PID))
		}
	}
	if c.caching != nil {
		<-c.caching
	}
	if c.runDir != "" {
		if err := os.RemoveAll(c.runDir); err != nil {
			errs = append(errs, fmt.Errorf("remove %s: %w", c.runDir, err))
		}
	}
	if err := c.wd.release(30 * time.Second); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func logTail(path string) string {
	b, _ := os.ReadFile(path)
	return string(tail(b, 2000))
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

func chown(path string, acct account) error {
	if acct.uid < 0 {
		return nil
	}
	if err := os.Chown(path, acct.uid, acct.gid); err != nil {
		return fmt.Errorf("hand %s to %s: %w", path, acct, err)
	}
	return nil
}

// markOwner records which process made dir, so a later run can tell a
// leftover (owner gone) from a directory in use.
func markOwner(dir string) error {
	if err := owner.Mark(dir); err != nil {
		return err
	}
	return nil
}

// cacheKey names a cached cluster: everything that changes initdb's output.
func cacheKey(b *binaries) string {
	h := sha256.New()
	_, _ = fmt.Fprintln(h, cacheFormat, b.dir, b.version, strings.Join(initdbArgs, " "))
	for _, name := range []string{"postgres", "initdb"} {
		if st, err := os.Stat(filepath.Join(b.dir, name)); err == nil {
			_, _ = fmt.Fprintln(h, name, st.Size(), st.ModTime().UnixNano())
		}
	}
	return fmt.Sprintf("pg%d.%d-%s", b.major, b.minor, hex.EncodeToString(h.Sum(nil))[:16])
}

// cacheRootDir is where initialised clusters are kept; benchmarks replace it.
var cacheRootDir = func() string {
	if dir, err := os.UserCacheDir(); err == nil {
		return filepath.Join(dir, "twice", "pgdata")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("twice-cache-%d", os.Geteuid()), "pgdata")
}

// storeCache copies a fresh cluster into the cache. Two test binaries may
// do it at once: each builds its own temp dir and renames it into place;
// the loser removes its copy.
func storeCache(data, root, key string) error {
	if err := os.MkdirAll(root, 0o700); err != nil {
		return err
	}
	sweepCacheTemps(root)
	tmp, err := os.MkdirTemp(root, "tmp-")
	if err != nil {
		return err
	}
	if err := markOwner(tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	dst := filepath.Join(tmp, "data")
	if err := copyTree(data, dst, account{uid: -1, gid: -1}); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if err := os.Rename(dst, filepath.Join(root, key)); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	return os.RemoveAll(tmp)
}

// copyTree copies directory src to dst (which must not exist), giving the
// copies to acct. Files are copied by a few goroutines: most of the time
// goes to creating ~1000 small files.
func copyTree(src, dst string, acct account) error {
	var files []string
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if err := os.Mkdir(target, info.Mode().Perm()|0o700); err != nil {
				return err
			}
			return chownCopy(target, acct)
		case d.Type().IsRegular():
			files = append(files, rel)
		}
		return nil // a cluster fresh from initdb has no links or sockets
	})
	if err != nil {
		return err
	}
	const workers = 4
	errs := make(chan error, workers)
	next := make(chan string)
	for range workers {
		go func() {
			var first error
			for rel := range next {
				if first != nil {
					continue
				}
				target := filepath.Join(dst, rel)
				if err := copyFile(filepath.Join(src, rel), target); err != nil {
					first = err
				} else {
					first = chownCopy(target, acct)
				}
			}
			errs <- first
		}()
	}
	for _, rel := range files {
		next <- rel
	}
	close(next)
	var all []error
	for range workers {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

func chownCopy(path string, acct account) error {
	if acct.uid < 0 {
		return nil
	}
	return os.Lchown(path, acct.uid, acct.gid)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer func() { _ = in.Close() }()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		return err
	}
	return out.Close()
}
