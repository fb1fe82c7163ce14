package redisstore

// JobKey returns the key of job id's hash in st, for tests.
func JobKey(st *Store, id int64) string { return st.k.job(id) }

// ImportCallMax is how many jobs one call of sortie_import writes.
const ImportCallMax = importCallMax

// SetImportHook makes st's JobImport call f before each call of
// sortie_import, with its number (from 0).
func SetImportHook(st *Store, f func(call int)) { st.importHook = f }
