package pgserver

// The Docker mode runs testcontainers-go in a helper process,
// cmd/twice-pgdocker, built on demand (see dockerhelper.go) and driven
// over its stdin and stdout: testcontainers-go, the Docker client and
// OpenTelemetry (about 130 packages) are then compiled only when Docker is
// used, and linked into no test binary. The helper removes the container
// when its stdin ends, that is when this process exits; the watchdog
// removes it too (with the helper's remove command) should the helper
// have been killed as well.

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/runtwice/twice/internal/blame"
	"github.com/runtwice/twice/internal/owner"
	"github.com/runtwice/twice/internal/pgserver/dockerproto"
)

// ownerLabel marks twice's containers with "<pid> <start> <host>" of the
// test process, so a later run removes those a killed run left, and never
// anyone else's (cmd/twice-pgdocker reads it).
const ownerLabel = "org.runtwice.twice.owner"

const dockerReadyTimeout = 2 * time.Minute

// containerArgs tune the container's server like serverArgs tune a local
// one; its data directory is a tmpfs (see cmd/twice-pgdocker).
var containerArgs = []string{
	"postgres",
	"-c", "fsync=off",
	"-c", "synchronous_commit=off",
	"-c", "full_page_writes=off",
	"-c", "max_connections=250",
	"-c", "autovacuum=off",
	"-c", "jit=off",
	"-c", "max_parallel_workers_per_gather=0",
	"-c", "TimeZone=UTC",
}

func startDocker(ctx context.Context, image string) (*Server, error) {
	if image == "" {
		image = DefaultImage
	}
	if err := dockerEndpointHint(); err != nil {
		return nil, err
	}
	helper, err := dockerHelper(ctx)
	if err != nil {
		return nil, err
	}
	wd, err := startWatchdog()
	if err != nil {
		return nil, err
	}
	password, err := randomPassword()
	if err != nil {
		_ = wd.release(time.Minute)
		return nil, err
	}
	h, err := startDockerProcess(helper)
	if err != nil {
		_ = wd.release(time.Minute)
		return nil, err
	}
	stop := func() error {
		var errs []error
		if err := h.stop(); err != nil {
			errs = append(errs, err)
		}
		if err := wd.release(2 * time.Minute); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	hostname, _ := os.Hostname()
	var watchErr error
	resp, err := h.call(dockerproto.Request{
		Op: dockerproto.OpStart, Image: image, Password: password, Args: containerArgs,
		Labels: map[string]string{ownerLabel: fmt.Sprintf("%s %s", owner.Self(), hostname)},
	}, func(id string) {
		watchErr = wd.watchContainer(id, helper)
	})
	if err == nil && watchErr != nil {
		err = watchErr
	}
	if err != nil {
		_ = stop()
		return nil, err
	}
	srv, err := connectContainer(ctx, h, resp, password)
	if err != nil {
		_ = stop()
		return nil, err
	}
	srv.stop = stop
	srv.container = resp.ID
	srv.image = image
	srv.ctr = h
	return srv, nil
}

// connectContainer waits until the server in the container answers a
// query. The log line "ready to accept connections" is no proof: the
// official image starts a temporary server for its init scripts, then
// restarts.
func connectContainer(ctx context.Context, h *dockerProcess, started dockerproto.Response, password string) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerReadyTimeout)
	defer cancel()
	base := formatKeywordValue(map[string]string{
		"host": started.Host, "port": started.Port, "user": "postgres", "password": password,
		"dbname": "postgres", "sslmode": "disable", "connect_timeout": "10",
	})
	cfg, err := pgconn.ParseConfig(base)
	if err != nil {
		return nil, err
	}
	delay := 20 * time.Millisecond
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		version, _, err := probe(attempt, cfg)
		cancelAttempt()
		if err == nil {
			return &Server{mode: ModeDocker, base: base, version: version}, nil
		}
		if st, serr := h.call(dockerproto.Request{Op: dockerproto.OpState}, nil); serr == nil && !st.Running {
			return nil, fmt.Errorf("PostgreSQL container %s exited (code %d) before it answered; its log ends:\n%s", shortID(started.ID), st.ExitCode, h.logTail())
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("PostgreSQL container %s did not answer on %s:%s within %s (%w); its log ends:\n%s", shortID(started.ID), started.Host, started.Port, dockerReadyTimeout, err, h.logTail())
		case <-time.After(delay):
		}
		delay = min(2*delay, 250*time.Millisecond)
	}
}

// dockerEndpointHint says whether a Docker engine may be here without
// building the helper: where none of the places testcontainers-go looks
// exists, the answer is a quick "unavailable" rather than a minute's build.
func dockerEndpointHint() error {
	if os.Getenv("DOCKER_HOST") != "" || os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") != "" || os.Getenv("DOCKER_CONTEXT") != "" {
		return nil
	}
	candidates := []string{"/var/run/docker.sock", "/run/docker.sock"}
	if home, err := os.UserHomeDir(); err == nil {
		candidates = append(candidates,
			home+"/.testcontainers.properties", // may name docker.host
			home+"/.docker/run/docker.sock",
			home+"/.docker/desktop/docker.sock",
			home+"/.docker/contexts/meta",
			home+"/.colima/default/docker.sock",
			home+"/.rd/docker.sock",
		)
	}
	if xdg := os.Getenv("XDG_RUNTIME_DIR"); xdg != "" {
		candidates = append(candidates, xdg+"/docker.sock", xdg+"/podman/podman.sock")
	}
	candidates = append(candidates, fmt.Sprintf("/run/user/%d/docker.sock", os.Getuid()))
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return nil
		}
	}
	return unavailable("no Docker engine answered: DOCKER_HOST is unset and there is no /var/run/docker.sock, rootless socket or ~/.testcontainers.properties")
}

// dockerProcess is a running cmd/twice-pgdocker serve.
type dockerProcess struct {
	path   string
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Scanner
	stderr *tailBuffer

	mu     sync.Mutex // one request at a time
	closed bool
}

func startDockerProcess(path string) (*dockerProcess, error) {
	cmd := exec.Command(path, "serve")
	cmd.Dir = "/"
	cmd.Env = filteredEnv("GOCOVERDIR", "TWICE_DATABASE_URL")
	// Its own group: a ^C for go test must not stop it before it removed
	// the container; it ends when its stdin does.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("pipe to %s: %w", path, err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("pipe from %s: %w", path, err)
	}
	tb := &tailBuffer{max: 4000}
	cmd.Stderr = tb
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start the Docker helper %s: %w", path, err)
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 64*1024), 16<<20)
	return &dockerProcess{path: path, cmd: cmd, stdin: stdin, out: sc, stderr: tb}, nil
}

// call sends req and returns the helper's answer; created, if not nil, is
// called with each early Created report.
func (h *dockerProcess) call(req dockerproto.Request, created func(id string)) (dockerproto.Response, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return dockerproto.Response{}, fmt.Errorf("the Docker helper already stopped (%s)", req.Op)
	}
	line, err := json.Marshal(req)
	if err != nil {
		return dockerproto.Response{}, fmt.Errorf("the Docker helper request: %w", err)
	}
	if _, err := h.stdin.Write(append(line, '\n')); err != nil {
		return dockerproto.Response{}, h.died(req.Op, err)
	}
	for {
		if !h.out.Scan() {
			return dockerproto.Response{}, h.died(req.Op, h.out.Err())
		}
		var resp dockerproto.Response
		if err := json.Unmarshal(h.out.Bytes(), &resp); err != nil {
			return dockerproto.Response{}, fmt.Errorf("the Docker helper %s answered %q to %s: %w", h.path, h.out.Text(), req.Op, err)
		}
		if resp.Created != "" {
			if created != nil {
				created(resp.Created)
			}
			continue
		}
		if resp.Error != "" {
			if resp.Unavailable {
				return resp, unavailable("%s", resp.Error)
			}
			return resp, errors.New(resp.Error)
		}
		return resp, nil
	}
}

func (h *dockerProcess) died(op string, err error) error {
	if err == nil {
		err = io.EOF // its stdout ended
	}
	_ = h.cmd.Wait()
	msg := strings.TrimSpace(h.stderr.String())
	if msg == "" {
		msg = "(it printed nothing)"
	}
	return fmt.Errorf("the Docker helper %s ended during %s (%w, %s); its stderr ends:\n%s", h.path, op, err, h.cmd.ProcessState, msg)
}

func (h *dockerProcess) logTail() string {
	resp, err := h.call(dockerproto.Request{Op: dockerproto.OpLogs}, nil)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return resp.Logs
}

// stop removes the container and waits for the helper to exit.
func (h *dockerProcess) stop() error {
	_, err := h.call(dockerproto.Request{Op: dockerproto.OpStop}, nil)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return nil
	}
	h.closed = true
	_ = h.stdin.Close()
	done := make(chan struct{})
	go func() { _ = h.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = h.cmd.Process.Kill()
		if err == nil {
			err = fmt.Errorf("the Docker helper (pid %d) still running 2m after stop: killed it", h.cmd.Process.Pid)
		}
	}
	return err
}

// execToFile runs cmd in the container with env, its stdout into path.
func (h *dockerProcess) execToFile(_ context.Context, cmd, env []string, path string) (dockerproto.Response, error) {
	// The helper runs in /.
	path, err := filepath.Abs(path)
	if err != nil {
		return dockerproto.Response{}, err
	}
	return h.call(dockerproto.Request{Op: dockerproto.OpExec, Cmd: cmd, Env: env, Stdout: path}, nil)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// sweepContainers removes the containers that test processes on this host
// left when they and their watchdogs were killed.
func sweepContainers(ctx context.Context, helper string) error {
	out, err := exec.CommandContext(ctx, helper, "sweep").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s sweep: %w: %s", helper, err, out)
	}
	return nil
}

// removeContainer is the watchdog's way to remove a container.
func removeContainer(ctx context.Context, id, helper string) {
	_ = exec.CommandContext(ctx, helper, "remove", id).Run()
}

func randomPassword() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("random password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// execer runs a command in a container, its stdout into a file.
type execer interface {
	execToFile(ctx context.Context, cmd, env []string, path string) (dockerproto.Response, error)
}

// dumpInContainer runs pg_dump inside the server's container, over TCP to
// the server there with the password in the exec's environment (never its
// argv, which ps shows), and writes what it prints to tmp.
func (s *Server) dumpInContainer(ctx context.Context, database, tmp string, skipData []string) error {
	where := fmt.Sprintf("pg_dump inside PostgreSQL container %s (image %s)", shortID(s.container), s.image)
	if s.ctr == nil {
		return fmt.Errorf("dumping database %s with %s: no handle on the container", database, where)
	}
	cfg, err := pgconn.ParseConfig(s.base)
	if err != nil {
		return fmt.Errorf("dumping database %s: %w", database, err)
	}
	conn := formatKeywordValue(map[string]string{
		"host": "127.0.0.1", "port": "5432", "user": cfg.User, "dbname": database, "sslmode": "disable",
	})
	cmd := append(append([]string{"pg_dump"}, pgDumpArgs(skipData)...), "-d", conn)
	res, err := s.ctr.execToFile(ctx, cmd, []string{"PGPASSWORD=" + cfg.Password}, tmp)
	if err != nil {
		return blame.Userf("dumping database %s with %s failed: %w", database, where, err)
	}
	switch {
	case res.Code != 0:
		msg := strings.TrimSpace(string(tail([]byte(res.Stderr), 2000)))
		if msg == "" {
			// The engine reports a command it could not start on stdout.
			b, _ := os.ReadFile(tmp)
			msg = strings.TrimSpace(string(tail(b, 2000)))
		}
		if msg == "" {
			msg = "(it printed nothing)"
		}
		if res.Code == 126 || res.Code == 127 {
			msg += "\nthe image has no runnable pg_dump on its PATH: set TWICE_POSTGRES_IMAGE to a PostgreSQL image that has one (the official postgres images do)"
		}
		return blame.Userf("dumping database %s with %s failed with exit code %d:\n%s", database, where, res.Code, msg)
	case res.ReadError != "":
		return fmt.Errorf("dumping database %s with %s: reading its output: %s", database, where, res.ReadError)
	}
	return nil
}
