//go:build !unix

package sqlitestore

// freeBytes returns -1: the free space is not read on this system, and the
// write-ahead log keeps to Options.WALSizeLimit alone.
func freeBytes(string) int64 { return -1 }
