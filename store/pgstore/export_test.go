package pgstore

// The statements TestBigTable explains, as the store sends them.
const (
	SQLCounts  = sqlCounts
	SQLExpired = sqlExpired
	SQLPrune   = sqlPrune
	// SQLQueueState is what a short fetch reads after its claim.
	SQLQueueState = sqlQueueState
)
