//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package report

import (
	"errors"
	"os"
	"syscall"
)

// lockDir takes an exclusive lock on the open directory f without
// waiting, and says whether it got it. The lock goes with f's close, or
// the process's end, so a killed run holds nothing.
func lockDir(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
