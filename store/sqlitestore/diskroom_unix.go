//go:build unix

package sqlitestore

import (
	"path/filepath"

	"golang.org/x/sys/unix"
)

// freeBytes returns the space free to unprivileged writers on the file
// system holding path's directory, or -1 when it cannot tell.
func freeBytes(path string) int64 {
	var fs unix.Statfs_t
	if err := unix.Statfs(filepath.Dir(path), &fs); err != nil {
		return -1
	}
	return int64(fs.Bavail) * int64(fs.Bsize)
}
