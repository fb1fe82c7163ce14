package pgstore

// The statements TestBigTable explains, as the store sends them.
const (
	SQLCounts  = sqlCounts
	SQLExpired = sqlExpired
	SQLPrune   = sqlPrune
)
