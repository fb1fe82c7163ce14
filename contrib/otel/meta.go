package otel

import (
	"encoding/json"
	"fmt"

	"go.opentelemetry.io/otel/propagation"

	"github.com/sortiehq/sortie/store"
)

// withCarrier returns meta, a job's Meta (a JSON object, or empty), with key
// set to the carrier's fields and every other key as it was. It fails when
// meta is not a JSON object or the result would be over the store's limit.
func withCarrier(meta []byte, key string, carrier propagation.MapCarrier) ([]byte, error) {
	var fields map[string]json.RawMessage
	if len(meta) > 0 {
		if err := json.Unmarshal(meta, &fields); err != nil {
			return nil, fmt.Errorf("meta is not a JSON object: %w", err)
		}
	}
	if fields == nil {
		fields = make(map[string]json.RawMessage, 1)
	}
	raw, err := json.Marshal(carrier)
	if err != nil {
		return nil, fmt.Errorf("encode trace context: %w", err)
	}
	fields[key] = raw
	out, err := json.Marshal(fields)
	if err != nil {
		return nil, fmt.Errorf("encode meta: %w", err)
	}
	if len(out) > store.MaxMetaBytes {
		return nil, fmt.Errorf("meta with the trace context would be %d bytes, over the limit of %d", len(out), store.MaxMetaBytes)
	}
	return out, nil
}

// carrierOf returns the fields under key in meta, a job's Meta, or nil when
// there are none: no Meta, no such key, or not an object of strings there.
func carrierOf(meta []byte, key string) propagation.MapCarrier {
	if len(meta) == 0 {
		return nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(meta, &fields); err != nil {
		return nil
	}
	raw, ok := fields[key]
	if !ok {
		return nil
	}
	var carrier propagation.MapCarrier
	if err := json.Unmarshal(raw, &carrier); err != nil {
		return nil
	}
	return carrier
}
