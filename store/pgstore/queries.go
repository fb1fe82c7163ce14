package pgstore

import "sync"

// queries turns the package's SQL, written with the {s} schema placeholder,
// into the statements of one schema, once each. pgx prepares and caches
// every statement per connection, so the hot paths run prepared.
type queries struct {
	schema string
	m      sync.Map // template -> statement
}

func buildQueries(schema string) *queries { return &queries{schema: schema} }

// get returns template with the schema filled in.
func (q *queries) get(template string) string {
	if v, ok := q.m.Load(template); ok {
		return v.(string)
	}
	s := withSchema(template, q.schema)
	q.m.Store(template, s)
	return s
}
