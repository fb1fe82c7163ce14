package redisstore

import (
	"context"
	"fmt"
)

// migrateIndexes moves the ID indexes that library versions before 13
// kept, one sorted set per queue and state (QP x:<state>), into the
// bucketed indexes this version keeps (QP i:<state>, see sortie.lua's
// index_add), a thousand IDs a call of sortie_index_migrate per queue,
// until none is left. Open runs it every time: it costs one call per
// queue when there is nothing to move, and finishes the work of a
// process that stopped in the middle. Until it has run, readers count and
// list both kinds of index, so jobs are never missing from a listing or a
// count while it runs.
func (s *Store) migrateIndexes(ctx context.Context) error {
	queues, err := s.queueNames(ctx)
	if err != nil {
		return err
	}
	for len(queues) > 0 {
		pipe := s.rdb.Pipeline()
		left := make([]interface{ Int64() (int64, error) }, len(queues))
		for i, q := range queues {
			left[i] = pipe.FCall(ctx, "sortie_index_migrate", []string{s.k.queue(q) + "cfg"},
				s.arg0, q, group(s.k.groupOf(q)))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return fmt.Errorf("redisstore: move the job indexes of an earlier version: %w", err)
		}
		var more []string
		for i, q := range queues {
			if n, _ := left[i].Int64(); n > 0 {
				more = append(more, q)
			}
		}
		queues = more
	}
	return nil
}
