package pgtest

import (
	"errors"
	"fmt"
	"net/url"
)

// SchemaParam is the query parameter of a postgres:// URL naming the schema
// a store lives in, so that one string names the store for every process a
// test starts.
const SchemaParam = "sortie_schema"

// WithSchema returns the postgres:// URL u with schema added as SchemaParam.
func WithSchema(u, schema string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", fmt.Errorf("parse postgres URL: %w", err)
	}
	q := parsed.Query()
	q.Set(SchemaParam, schema)
	parsed.RawQuery = q.Encode()
	return parsed.String(), nil
}

// SplitSchema undoes WithSchema: it returns the URL without SchemaParam,
// and the schema ("" when the URL names none).
func SplitSchema(u string) (dsn, schema string, err error) {
	parsed, err := url.Parse(u)
	if err != nil {
		// The URL may hold a password: keep it out of the message.
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "", "", fmt.Errorf("parse postgres URL: %w", err)
	}
	q := parsed.Query()
	schema = q.Get(SchemaParam)
	q.Del(SchemaParam)
	parsed.RawQuery = q.Encode()
	return parsed.String(), schema, nil
}
