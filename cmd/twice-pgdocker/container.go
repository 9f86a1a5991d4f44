package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/testcontainers/testcontainers-go"
	tcexec "github.com/testcontainers/testcontainers-go/exec"
	tclog "github.com/testcontainers/testcontainers-go/log"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/runtwice/twice/internal/owner"
	"github.com/runtwice/twice/internal/pgserver/dockerproto"
	"github.com/runtwice/twice/internal/text"
)

// ownerLabel marks twice's containers with "<pid> <start> <host>" of the
// test process, so a later run removes those a killed run left, and never
// anyone else's. internal/pgserver sets it.
const ownerLabel = "org.runtwice.twice.owner"

const (
	dockerPingTimeout = 10 * time.Second
	dockerPullTimeout = 5 * time.Minute
)

// unavailableError is "no Docker here", as opposed to a Docker that failed.
type unavailableError struct{ what string }

func (e *unavailableError) Error() string { return e.what }

func errorResponse(err error) dockerproto.Response {
	var u *unavailableError
	return dockerproto.Response{Error: err.Error(), Unavailable: errors.As(err, &u)}
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
			return nil, &unavailableError{fmt.Sprintf("no Docker engine answered: %v", text.FirstLine(r.err.Error()))}
		}
		return r.cli, nil
	case <-ctx.Done():
		return nil, &unavailableError{fmt.Sprintf("no Docker engine answered within %s", dockerPingTimeout)}
	}
}

// pgContainer is the one container a serve process drives.
type pgContainer struct {
	ctr        *tcpostgres.PostgresContainer
	id         string
	host, port string
}

// start creates and starts the container req describes; created is called
// with its ID as soon as it exists, before it is started.
func start(ctx context.Context, req dockerproto.Request, created func(id string)) (*pgContainer, error) {
	if req.Image == "" || req.Password == "" {
		return nil, errors.New("twice-pgdocker: start needs an image and a password")
	}
	cli, err := dockerClient(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { _ = cli.Close() }()
	if err := ensureImage(ctx, cli, req.Image); err != nil {
		return nil, err
	}
	if !testcontainers.ReadConfig().RyukDisabled {
		reaper := testcontainers.ReaperDefaultImage //nolint:staticcheck // the name is what we need to look for
		if _, err := cli.ImageInspect(ctx, reaper); err != nil {
			return nil, fmt.Errorf("testcontainers-go's reaper Ryuk (image %s) is not on this machine and would be pulled with retries for minutes: set TESTCONTAINERS_RYUK_DISABLED=true (twice removes its own containers, even after a crash), or docker pull %s", reaper, reaper)
		}
	}
	sweepContainers(ctx, cli)

	// A local engine (unix socket) publishes ports on this machine: reach
	// them on loopback, and publish only there. testcontainers-go would
	// pick the default gateway's address when it finds /.dockerenv.
	loopback := isLocalEngine(cli.DaemonHost()) && os.Getenv("TESTCONTAINERS_HOST_OVERRIDE") == ""
	ctr, err := tcpostgres.Run(ctx, req.Image,
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword(req.Password),
		tcpostgres.WithDatabase("postgres"),
		testcontainers.WithCmd(req.Args...),
		// initdb and every test database on tmpfs: ~5x faster than the overlay fs.
		testcontainers.WithTmpfs(map[string]string{"/var/lib/postgresql": "rw"}),
		testcontainers.WithLabels(req.Labels),
		testcontainers.WithHostConfigModifier(func(hc *container.HostConfig) {
			if loopback {
				hc.PortBindings = network.PortMap{network.MustParsePort("5432/tcp"): {{HostIP: netip.MustParseAddr("127.0.0.1")}}}
			}
		}),
		testcontainers.WithLogger(tclog.NewNoopLogger()),
		testcontainers.WithAdditionalLifecycleHooks(testcontainers.ContainerLifecycleHooks{
			PostCreates: []testcontainers.ContainerHook{func(_ context.Context, c testcontainers.Container) error {
				created(c.GetContainerID())
				return nil
			}},
		}),
	)
	c := &pgContainer{ctr: ctr}
	if ctr != nil {
		c.id = ctr.GetContainerID()
	}
	if err != nil {
		_ = c.terminate(context.Background())
		return nil, fmt.Errorf("start PostgreSQL container from %s: %w", req.Image, err)
	}
	c.host = "127.0.0.1"
	if !loopback {
		if c.host, err = ctr.Host(ctx); err != nil {
			_ = c.terminate(context.Background())
			return nil, fmt.Errorf("the Docker host of the PostgreSQL container: %w", err)
		}
	}
	port, err := ctr.MappedPort(ctx, "5432/tcp")
	if err != nil {
		_ = c.terminate(context.Background())
		return nil, fmt.Errorf("port of the PostgreSQL container: %w", err)
	}
	c.port = port.Port()
	return c, nil
}

func (c *pgContainer) terminate(ctx context.Context) error {
	if c.ctr == nil {
		return nil
	}
	ctr := c.ctr
	c.ctr = nil
	if err := ctr.Terminate(ctx); err != nil {
		return fmt.Errorf("remove PostgreSQL container %s: %w", shortID(c.id), err)
	}
	return nil
}

func (c *pgContainer) state(ctx context.Context) dockerproto.Response {
	st, err := c.ctr.State(ctx)
	if err != nil {
		return dockerproto.Response{Error: fmt.Sprintf("state of PostgreSQL container %s: %v", shortID(c.id), err)}
	}
	return dockerproto.Response{Running: st.Running, ExitCode: st.ExitCode}
}

func (c *pgContainer) logTail() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rc, err := c.ctr.Logs(ctx)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer func() { _ = rc.Close() }()
	b, _ := io.ReadAll(rc)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// execToFile runs req.Cmd in the container with req.Env, writing its
// stdout to req.Stdout.
func (c *pgContainer) execToFile(ctx context.Context, req dockerproto.Request) dockerproto.Response {
	code, out, err := c.ctr.Exec(ctx, req.Cmd, tcexec.WithEnv(req.Env))
	if err != nil {
		return dockerproto.Response{Error: err.Error()}
	}
	f, err := os.OpenFile(req.Stdout, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return dockerproto.Response{Error: err.Error()}
	}
	var stderr bytes.Buffer
	_, copyErr := stdcopy.StdCopy(f, &stderr, out)
	if err := f.Close(); err != nil {
		return dockerproto.Response{Error: err.Error()}
	}
	resp := dockerproto.Response{Code: code, Stderr: stderr.String()}
	if copyErr != nil {
		resp.ReadError = copyErr.Error()
	}
	return resp
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
		return fmt.Errorf("inspect Docker image %s: %w", image, err)
	}
	pctx, cancel := context.WithTimeout(ctx, dockerPullTimeout)
	defer cancel()
	resp, err := cli.ImagePull(pctx, image, client.ImagePullOptions{})
	if err == nil {
		err = resp.Wait(pctx)
		_ = resp.Close()
	}
	if err != nil {
		return fmt.Errorf("Docker image %s is not on this machine and pulling it failed: %v; docker pull it, or set TWICE_POSTGRES_IMAGE to a PostgreSQL image you have (docker images)", image, text.FirstLine(err.Error())) //nolint:staticcheck // ST1005: it starts with the name Docker, as the message always did
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

func removeContainer(ctx context.Context, id string) error {
	cli, err := testcontainers.NewDockerClientWithOpts(ctx)
	if err != nil {
		return fmt.Errorf("remove container %s: %w", shortID(id), err)
	}
	defer func() { _ = cli.Close() }()
	if _, err := cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("remove container %s: %w", shortID(id), err)
	}
	return nil
}

func shortID(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
