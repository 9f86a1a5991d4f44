package main

import "syscall"

// coreAttr puts twice-core in a process group of its own, so that a
// terminal's ^C reaches it once, through the launcher, and sends it
// SIGTERM should the launcher die (even by SIGKILL): it then stops go
// test and removes its run's files as it does on a signal.
func coreAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
}
