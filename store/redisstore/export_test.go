package redisstore

// JobKey returns the key of job id's hash in st, for tests.
func JobKey(st *Store, id int64) string { return st.k.job(id) }
