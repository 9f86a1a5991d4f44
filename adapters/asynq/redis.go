package twiceasynq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runtwice/twice/internal/redact"
)

// RedisURLEnv names the environment variable that points the adapter at a
// Redis server of your own ("redis://localhost:6379"). Its databases are
// the adapter's while a test binary runs: each scenario takes one and
// flushes it (FLUSHDB) before and after.
const RedisURLEnv = "TWICE_REDIS_URL"

// redisDatabases is how many databases the throwaway server has: one per
// scenario running at once, with room for TWICE_PARALLEL and the clean
// runs.
const redisDatabases = 256

// redisServer is the Redis every scenario of this test binary uses: the
// options to connect to it, and how many databases it has.
type redisServer struct {
	opts      *redis.Options
	databases int
	where     string // said in errors: "TWICE_REDIS_URL=...", "redis-server on ..."

	mu   sync.Mutex
	free []int // database indexes not taken
}

var (
	serverOnce sync.Once
	server     *redisServer
	serverErr  error
)

// theRedis finds Redis once per test binary: TWICE_REDIS_URL, then a
// local redis-server binary started as a throwaway server on a unix
// socket, killed when the test binary exits.
func theRedis(ctx context.Context) (*redisServer, error) {
	serverOnce.Do(func() { server, serverErr = findRedis(ctx) })
	return server, serverErr
}

func findRedis(ctx context.Context) (*redisServer, error) {
	if u := os.Getenv(RedisURLEnv); u != "" {
		opts, err := redis.ParseURL(u)
		if err != nil {
			return nil, fmt.Errorf("twiceasynq: %s=%s is not a Redis URL (redis://[user[:password]@]host[:port][/db]): %s", RedisURLEnv, redact.Value(RedisURLEnv, u), redact.Env().String(err.Error()))
		}
		s := &redisServer{opts: opts, where: RedisURLEnv + "=" + redact.Value(RedisURLEnv, u)}
		n, err := s.countDatabases(ctx)
		if err != nil {
			return nil, err
		}
		s.databases = n
		s.fill()
		return s, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errNoRedis
	}
	return startLocal(ctx, bin)
}

// errNoRedis names the ways to give the adapter a Redis.
var errNoRedis = errors.New("twiceasynq: no Redis to run asynq on: set " + RedisURLEnv +
	" to a Redis server the tests may flush (redis://localhost:6379), or install redis-server" +
	" (apt-get install redis-server) so the adapter starts a throwaway one on a unix socket," +
	" or run Redis in Docker (docker run -d -p 6379:6379 redis:7) and set " + RedisURLEnv + "=redis://localhost:6379")

// dirPrefix starts the name of every throwaway server's directory.
const dirPrefix = "twiceasynq-redis-"

// startLocal starts redis-server on a unix socket in a fresh temporary
// directory. The server dies with the test binary however it ends: the
// kernel kills it when its parent dies (Pdeathsig), and a directory a
// killed binary left is removed by the next one (its owner file names a
// process that is gone).
func startLocal(ctx context.Context, bin string) (*redisServer, error) {
	sweepLeftovers()
	dir, err := os.MkdirTemp("", dirPrefix)
	if err != nil {
		return nil, fmt.Errorf("twiceasynq: a directory for redis-server: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, fmt.Errorf("twiceasynq: marking %s: %w", dir, err)
	}
	sock := filepath.Join(dir, "redis.sock")
	cmd := exec.Command(bin, "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700",
		"--databases", strconv.Itoa(redisDatabases), "--save", "", "--appendonly", "no",
		"--dir", dir, "--logfile", filepath.Join(dir, "redis.log"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("twiceasynq: starting %s: %w", bin, err)
	}
	go func() { _ = cmd.Wait() }()
	s := &redisServer{opts: &redis.Options{Network: "unix", Addr: sock}, databases: redisDatabases,
		where: fmt.Sprintf("%s on %s (pid %d)", bin, sock, cmd.Process.Pid)}
	c := redis.NewClient(s.opts)
	defer func() { _ = c.Close() }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := c.Ping(ctx).Err(); err == nil {
			break
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			_ = cmd.Process.Kill()
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			return nil, fmt.Errorf("twiceasynq: %s did not answer within 10s: %w; its log: %s", s.where, err, strings.TrimSpace(string(log)))
		}
		time.Sleep(5 * time.Millisecond)
	}
	s.fill()
	return s, nil
}

// sweepLeftovers removes the directories of throwaway servers whose test
// binary is gone (killed before it could clean up); their servers died
// with it.
func sweepLeftovers() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), dirPrefix+"*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			continue // alive, or not ours to judge
		}
		_ = os.RemoveAll(d)
	}
}

func (s *redisServer) countDatabases(ctx context.Context) (int, error) {
	c := redis.NewClient(s.opts)
	defer func() { _ = c.Close() }()
	got, err := c.ConfigGet(ctx, "databases").Result()
	if err != nil {
		return 0, fmt.Errorf("twiceasynq: asking %s how many databases it has: %w", s.where, err)
	}
	n, err := strconv.Atoi(got["databases"])
	if err != nil || n < 1 {
		return 0, fmt.Errorf("twiceasynq: %s says it has %q databases", s.where, got["databases"])
	}
	return n, nil
}

func (s *redisServer) fill() {
	for i := s.databases - 1; i >= 0; i-- {
		s.free = append(s.free, i)
	}
}

// take hands out a database index no running scenario uses.
func (s *redisServer) take() (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.free) == 0 {
		return 0, fmt.Errorf("twiceasynq: all %d databases of %s are taken by scenarios running at once; lower TWICE_PARALLEL or give the server more databases", s.databases, s.where)
	}
	db := s.free[len(s.free)-1]
	s.free = s.free[:len(s.free)-1]
	return db, nil
}

// give returns database indexes.
func (s *redisServer) give(dbs ...int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.free = append(s.free, dbs...)
}

// client is a new client on database db.
func (s *redisServer) client(db int) *redis.Client {
	o := *s.opts
	o.DB = db
	return redis.NewClient(&o)
}
