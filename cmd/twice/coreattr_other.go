//go:build !linux

package main

import "syscall"

// coreAttr puts twice-core in a process group of its own, so that a
// terminal's ^C reaches it once, through the launcher.
func coreAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
