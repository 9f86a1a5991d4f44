package main

import "syscall"

// childAttr puts go test in a process group of its own and kills it when
// twice dies, even by SIGKILL; its test binaries then die at their next
// write to go test, and the next run sweeps the build directories it left.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
