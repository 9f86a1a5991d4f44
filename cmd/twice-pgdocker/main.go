// Command twice-pgdocker starts and stops the PostgreSQL container of
// TWICE_POSTGRES=docker for the harness, through testcontainers-go. It is
// not meant to be run by hand: internal/pgserver builds it on demand (into
// the user's build cache) the first time a test binary needs Docker, so
// that testcontainers-go, the Docker client and OpenTelemetry are compiled
// only by those who use Docker and linked into no test binary.
//
// Usage:
//
//	twice-pgdocker serve        drive one container over stdin/stdout (below)
//	twice-pgdocker remove <id>  remove a container (the cleanup watchdog's way)
//	twice-pgdocker sweep        remove containers whose test process is gone
//
// serve reads one JSON request a line on stdin and answers each with one
// JSON line on stdout (see internal/pgserver/dockerproto). The first request must be
// "start"; while it runs, serve reports the container's ID as soon as the
// container exists ({"created": id}), before the final answer, so the
// caller can tell its watchdog. When stdin ends, for any reason (the test
// binary exited or was killed), serve removes the container and exits:
// the container never outlives the process that asked for it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/runtwice/twice/internal/pgserver/dockerproto"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "twice-pgdocker: usage: twice-pgdocker serve | remove <id> | sweep (the harness runs it; see internal/pgserver)")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "serve":
		// ^C is for go test; this process ends when its stdin does.
		signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE)
		os.Exit(serve(os.Stdin, os.Stdout))
	case "remove":
		if len(os.Args) != 3 {
			fmt.Fprintln(os.Stderr, "twice-pgdocker: usage: twice-pgdocker remove <container id>")
			os.Exit(2)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := removeContainer(ctx, os.Args[2]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	case "sweep":
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cli, err := dockerClient(ctx)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		sweepContainers(ctx, cli)
		_ = cli.Close()
	default:
		fmt.Fprintf(os.Stderr, "twice-pgdocker: unknown command %q: use serve, remove <id> or sweep\n", os.Args[1])
		os.Exit(2)
	}
}

// serve answers requests until stdin ends, then removes the container.
func serve(in io.Reader, out io.Writer) int {
	enc := json.NewEncoder(out)
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	var c *pgContainer
	defer func() {
		if c != nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_ = c.terminate(ctx)
		}
	}()
	for sc.Scan() {
		var req dockerproto.Request
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			_ = enc.Encode(dockerproto.Response{Error: fmt.Sprintf("twice-pgdocker: bad request %q: %v", sc.Text(), err)})
			continue
		}
		ctx := context.Background()
		var resp dockerproto.Response
		switch {
		case req.Op == dockerproto.OpStart && c != nil:
			resp.Error = "twice-pgdocker: a container was already started"
		case req.Op == dockerproto.OpStart:
			var err error
			c, err = start(ctx, req, func(id string) { _ = enc.Encode(dockerproto.Response{Created: id}) })
			if err != nil {
				resp = errorResponse(err)
				break
			}
			resp = dockerproto.Response{ID: c.id, Host: c.host, Port: c.port}
		case c == nil:
			resp.Error = fmt.Sprintf("twice-pgdocker: %q before start", req.Op)
		case req.Op == dockerproto.OpState:
			resp = c.state(ctx)
		case req.Op == dockerproto.OpLogs:
			resp = dockerproto.Response{Logs: c.logTail()}
		case req.Op == dockerproto.OpExec:
			resp = c.execToFile(ctx, req)
		case req.Op == dockerproto.OpStop:
			tctx, cancel := context.WithTimeout(ctx, time.Minute)
			err := c.terminate(tctx)
			cancel()
			c = nil
			if err != nil {
				resp = errorResponse(err)
			} else {
				resp.Stopped = true
			}
		default:
			resp.Error = fmt.Sprintf("twice-pgdocker: unknown op %q", req.Op)
		}
		if err := enc.Encode(resp); err != nil {
			return 1
		}
		if req.Op == dockerproto.OpStop {
			return 0
		}
	}
	return 0
}
