package main

import (
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/runtwice/twice/internal/blame"
)

// stopGrace is how long go test and its test binaries get to end after
// an interrupt (a test binary dies at once, go test then removes its build
// directories) before the whole group is killed.
const stopGrace = 10 * time.Second

// supervised is go test run in a process group of its own, with SIGINT and
// SIGTERM to twice passed on to the whole group: the go command, the
// compilers and the test binaries. (A test binary's PostgreSQL runs in a
// group of its own and is stopped by the binary's watchdog when the binary
// dies.) In its own group, go test is out of the terminal's reach, so a ^C
// reaches it only through twice, once.
type supervised struct {
	cmd    *exec.Cmd
	sigs   chan os.Signal
	done   chan struct{}
	wg     sync.WaitGroup
	mu     sync.Mutex
	caught os.Signal
}

// startSupervised starts cmd as described above. Signals are caught
// before it starts, so none falls in between and kills twice alone.
func startSupervised(cmd *exec.Cmd) (*supervised, error) {
	s := &supervised{cmd: cmd, sigs: make(chan os.Signal, 2), done: make(chan struct{})}
	cmd.SysProcAttr = childAttr()
	signal.Notify(s.sigs, syscall.SIGINT, syscall.SIGTERM)
	if err := cmd.Start(); err != nil {
		signal.Stop(s.sigs)
		return nil, err
	}
	s.wg.Add(1)
	go s.watch()
	return s, nil
}

func (s *supervised) watch() {
	defer s.wg.Done()
	pgid := s.cmd.Process.Pid
	select {
	case <-s.done:
		return
	case sig := <-s.sigs:
		s.mu.Lock()
		s.caught = sig
		s.mu.Unlock()
	}
	// SIGINT, as a terminal's ^C: the test binaries die, and the go
	// command, which waits for them, cleans up and exits.
	_ = syscall.Kill(-pgid, syscall.SIGINT)
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-s.done:
	case <-s.sigs: // asked twice: do not wait
	case <-t.C:
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
}

// wait waits for go test and returns the signal that interrupted the
// run, if one did, and go test's error. Whatever is left of its group is
// killed: a test binary must not outlive the run.
func (s *supervised) wait() (os.Signal, error) {
	err := s.cmd.Wait()
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	close(s.done)
	s.wg.Wait()
	signal.Stop(s.sigs)
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.caught, err
}

// interruptedLine is what twice says when a signal stopped it.
func interruptedLine(sig os.Signal, what string) string {
	return blame.Line("interrupted by %s: stopped go test and its test binaries, removed this run's temporary files; %s", signalName(sig), what)
}

func signalName(sig os.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	}
	return sig.String()
}
