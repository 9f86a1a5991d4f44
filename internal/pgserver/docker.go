package pgserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/runtwice/twice/internal/owner"
	"github.com/runtwice/twice/internal/text"
)

// ownerLabel marks twice's containers with "<pid> <start> <host>" of the
// test process, so a later run removes those a killed run left, and never
// anyone else's.
const ownerLabel = "org.runtwice.twice.owner"

const (
	dockerPingTimeout  = 10 * time.Second
	dockerPullTimeout  = 5 * time.Minute
	dockerReadyTimeout = 2 * time.Minute
)

// containerArgs tune the container's server like serverArgs tune a local
// one; its data directory is a tmpfs (see startDocker).
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

// dockerClient reaches the engine the way testcontainers-go will, failing
// within dockerPingTimeout when there is none.
func dockerClient(ctx context.Context) (*testcontainers.DockerClient, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerPingTimeout)
	defer cancel()
	type result struct {
		cli *testcontainers.DockerClient
		err error
	}
	// testcontainers-go's host discovery takes no deadline everywhere: bound it here.
	done := make(chan result, 1)
	go func() {
		cli, err := testcontainers.NewDockerClientWithOpts(ctx)
		if err == nil {
			if _, err = cli.Ping(ctx, client.PingOptions{}); err != nil {
				_ = cli.Close()
				cli = nil
			}
		}
		done <- result{cli, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, unavailable("no Docker engine answered: %v", text.FirstLine(r.err.Error()))
		}
		return r.cli, nil
	case <-ctx.Done():
		return nil, unavailable("no Docker engine answered within %s", dockerPingTimeout)
	}
}

func startDocker(ctx context.Context, image string) (*Server, error) {
	if image == "" {
		image = DefaultImage
	}
	cli, err := dockerClient(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	if err := ensureImage(ctx, cli, image); err != nil {
		return nil, err
	}
	if !testcontainers.ReadConfig().RyukDisabled {
		reaper := testcontainers.ReaperDefaultImage //nolint:staticcheck // the name is what we need to look for
		if _, err := cli.ImageInspect(ctx, reaper); err != nil {
			return nil, fmt.Errorf("[twice] internal: testcontainers-go's reaper Ryuk (image %s) is not on this machine and would be pulled with retries for minutes: set TESTCONTAINERS_RYUK_DISABLED=true (twice removes its own containers, even after a crash), or docker pull %s", reaper, reaper)
		}
	}
	sweepContainers(ctx, cli)

	wd, err := startWatchdog()
	if err != nil {
		return nil, err
	}
	password, err := randomPassword()
	if err != nil {
		_ = wd.release(time.Minute)
		return nil, err
	}
	hostname, _ := os.Hostname()
	// A local engine (unix socket) publishes ports on this machine: reach
	// them on loopback, and publish only there. testcontainers-go would
	// pick the default gateway's address when it finds /.dockerenv.
	loopback := isLocalEngine(cli.DaemonHost()) && os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == ""
	ctr, err := tcpostgres.Run(ctx, image,
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword(password),
		tcpostgres.WithDatabase("postgres"),
		testcontainers.WithCmd(containerArgs...),
		// initdb and every test database on tmpfs: ~5x faster than the overlay fs.
		testcontainers.WithTmpfs(map[string]string{"/var/lib/postgresql": "rw"}),
		testcontainers.WithLabels(map[string]string{ownerLabel: fmt.Sprintf("%s %s", owner.Self(), hostname)}),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			if loopback {
				hc.PortBindings = network.PortMap{network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1")}}}
			}
		}),
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		testcontainers.WithAdditionalLifecycleHooks(testcontainers.ContainerLifecycleHooks{
			PostCreates: []testcontainers.ContainerHook{func(_ context.Context, c testcontainers.Container) error {
				return wd.watchContainer(c.GetContainerID())
			}},
		}),
	)
	stop := func() error {
		var errs []error
		if ctr != nil {
			tctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := ctr.Terminate(tctx); err != nil {
				errs = append(errs, fmt.Errorf("[twice] internal: remove PostgreSQL container %s: %w", shortID(ctr.GetContainerID()), err))
			}
		}
		if err := wd.release(2 * time.Minute); err != nil {
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	}
	if err != nil {
		_ = stop()
		return nil, fmt.Errorf("[twice] internal: start PostgreSQL container from %s: %w", image, err)
	}
	srv, err := connectContainer(ctx, ctr, password, loopback)
	if err != nil {
		_ = stop()
		return nil, err
	}
	srv.stop = stop
	srv.container = ctr.GetContainerID()
	srv.image = image
	srv.ctr = ctr
	return srv, nil
}

// connectContainer waits until the server in ctr answers a query. The log
// line "ready to accept connections" is no proof: the official image
// starts a temporary server for its init scripts, then restarts.
func connectContainer(ctx context.Context, ctr *tcpostgres.PostgresContainer, password string, loopback bool) (*Server, error) {
	ctx, cancel := context.WithTimeout(ctx, dockerReadyTimeout)
	defer cancel()
	host := "127.0.0.1"
	if !loopback {
		h, err := ctr.Host(ctx)
		if err != nil {
			return nil, fmt.Errorf("[twice] internal: Docker host of the PostgreSQL container: %w", err)
		}
		host = h
	}
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		return nil, fmt.Errorf("[twice] internal: port of the PostgreSQL container: %w", err)
	}
	base := formatKeywordValue(map[string]string{
		"host": host, "port": port.Port(), "user": "postgres", "password": password,
		"dbname": "postgres", "sslmode": "disable", "connect_timeout": "10",
	})
	cfg, err := pgconn.ParseConfig(base)
	if err != nil {
		return nil, fmt.Errorf("[twice] internal: %w", err)
	}
	delay := 20 * time.Millisecond
	for {
		attempt, cancelAttempt := context.WithTimeout(ctx, 5*time.Second)
		version, _, err := probe(attempt, cfg)
		cancelAttempt()
		if err == nil {
			return &Server{mode: ModeDocker, base: base, version: version}, nil
		}
		if st, serr := ctr.State(ctx); serr == nil && !st.Running {
			return nil, fmt.Errorf("[twice] internal: PostgreSQL container %s exited (code %d) before it answered; its log ends:\n%s", shortID(ctr.GetContainerID()), st.ExitCode, containerLogTail(ctr))
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("[twice] internal: PostgreSQL container %s did not answer on %s:%s within %s (%w); its log ends:\n%s", shortID(ctr.GetContainerID()), host, port.Port(), dockerReadyTimeout, err, containerLogTail(ctr))
		case <-time.After(delay):
		}
		delay = min(2*delay, 250*time.Millisecond)
	}
}

func isLocalEngine(daemonHost string) bool {
	return strings.HasPrefix(daemonHost, "unix://") || strings.HasPrefix(daemonHost, "npipe://")
}

// ensureImage pulls image unless the engine has it, with one bounded try
// rather than testcontainers-go's minutes of retries.
func ensureImage(ctx context.Context, cli *testcontainers.DockerClient, image string) error {
	if _, err := cli.ImageInspect(ctx, image); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("[twice] internal: inspect Docker image %s: %w", image, err)
	}
	pctx, cancel := context.WithTimeout(ctx, dockerPullTimeout)
	defer cancel()
	resp, err := cli.ImagePull(pctx, image, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(pctx)
		_ = resp.Close()
	}
	if err != nil {
		return fmt.Errorf("[twice] internal: Docker image %s is not on this machine and pulling it failed: %v; docker pull it, or set TWICE_POSTGRES_IMAGE to a PostgreSQL image you have (docker images)", image, text.FirstLine(err.Error()))
	}
	return nil
}

// sweepContainers removes the containers of test processes on this host
// that are gone.
func sweepContainers(ctx context.Context, cli *testcontainers.DockerClient) {
	list, err := cli.ContainerList(ctx, client.ContainerListOptions{
		All:     true,
		Filters: make(client.Filters).Add("label", ownerLabel),
	})
	if err != nil {
		return
	}
	host, _ := os.Hostname()
	for _, c := range list.Items {
		f := strings.Fields(c.Labels[ownerLabel])
		if len(f) != 3 || f[2] != host {
			continue
		}
		p, ok := owner.Parse(f[0] + " " + f[1])
		if !ok || p.Alive() {
			continue
		}
		_, _ = cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
	}
}

// removeContainer is the watchdog's way to remove a container.
func removeContainer(ctx context.Context, id string) {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return
	}
	defer func() { _ = cli.Close() }()
	_, _ = cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
}

func containerLogTail(ctr *tcpostgres.PostgresContainer) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := ctr.Logs(ctx)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer func() { _ = rc.Close() }()
	b, _ := io.ReadAll(rc)
	return string(tail(b, 2000))
}

func randomPassword() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("[twice] internal: random password: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}

// execer runs a command in a container, as testcontainers.Container does.
type execer interface {
	Exec(ctx context.Context, cmd []string, options ...tcexec.ProcessOption) (int, io.Reader, error)
}

// dumpInContainer runs pg_dump inside the server's container, over TCP to
// the server there with the password in the exec's environment (never its
// argv, which ps shows), and writes what it prints to tmp.
func (s *Server) dumpInContainer(ctx context.Context, database, tmp string) error {
	where := fmt.Sprintf("pg_dump inside PostgreSQL container %s (image %s)", shortID(s.container), s.image)
	if s.ctr == nil {
		return fmt.Errorf("[twice] internal: dumping database %s with %s: no handle on the container", database, where)
	}
	cfg, err := pgconn.ParseConfig(s.base)
	if err != nil {
		return fmt.Errorf("[twice] internal: dumping database %s: %w", database, err)
	}
	conn := formatKeywordValue(map[string]string{
		"host": "127.0.0.1", "port": "5432", "user": cfg.User, "dbname": database, "sslmode": "disable",
	})
	cmd := append(append([]string{"pg_dump"}, pgDumpArgs...), "-d", conn)
	code, out, err := s.ctr.Exec(ctx, cmd, tcexec.WithEnv([]string{"PGPASSWORD=" + cfg.Password}))
	if err != nil {
		return fmt.Errorf("[twice] dumping database %s with %s failed: %w", database, where, err)
	}
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("[twice] internal: dumping database %s: %w", database, err)
	}
	var stderr bytes.Buffer
	_, copyErr := stdcopy.StdCopy(f, &stderr, out)
	closeErr := f.Close()
	switch {
	case code != 0:
		msg := strings.TrimSpace(string(tail(stderr.Bytes(), 2000)))
		if msg == "" {
			// The engine reports a command it could not start on stdout.
			b, _ := os.ReadFile(tmp)
			msg = strings.TrimSpace(string(tail(b, 2000)))
		}
		if msg == "" {
			msg = "(it printed nothing)"
		}
		if code == 126 || code == 127 {
			msg += "\nthe image has no runnable pg_dump on its PATH: set TWICE_POSTGRES_IMAGE to a PostgreSQL image that has one (the official postgres images do)"
		}
		return fmt.Errorf("[twice] dumping database %s with %s failed with exit code %d:\n%s", database, where, code, msg)
	case copyErr != nil:
		return fmt.Errorf("[twice] internal: dumping database %s with %s: reading its output: %w", database, where, copyErr)
	case closeErr != nil:
		return fmt.Errorf("[twice] internal: dumping database %s: %w", database, closeErr)
	}
	return nil
}
