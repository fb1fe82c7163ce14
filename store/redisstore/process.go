package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/registry"
)

// ProcessBeat records a beat of p.Process and forgets processes silent
// since p.ForgetBefore, in one call of sortie_process_beat. See
// store.Store.
func (s *Store) ProcessBeat(ctx context.Context, p *store.ProcessBeatParams) (*store.ProcessRow, error) {
	if err := store.ValidateProcess(&p.Process); err != nil {
		return nil, fmt.Errorf("redisstore: process beat: %w", err)
	}
	row := p.Process
	row.LastBeat = time.UnixMicro(p.Now.UnixMicro()).UTC()
	forget := "0"
	if !p.ForgetBefore.IsZero() {
		forget = strconv.FormatInt(p.ForgetBefore.UnixMicro(), 10)
	}
	v, err := s.fcall(ctx, "sortie_process_beat", s.k.procs(), s.arg0, row.ID, registry.Encode(&row),
		strconv.FormatInt(p.Now.UnixMicro(), 10), forget)
	if err != nil {
		return nil, err
	}
	cmd, _ := v.(string)
	row.Quiet, row.Stop = strings.Contains(cmd, "q"), strings.Contains(cmd, "s")
	return &row, nil
}

// ProcessCommand sets a command on a process. See store.Store.
func (s *Store) ProcessCommand(ctx context.Context, p *store.ProcessCommandParams) (*store.ProcessRow, error) {
	if err := store.ValidateProcessCommand(p.Command); err != nil {
		return nil, fmt.Errorf("redisstore: process command: %w", err)
	}
	v, err := s.fcall(ctx, "sortie_process_command", s.k.procs(), s.arg0, p.ID, string(p.Command)[:1])
	if err != nil {
		return nil, err
	}
	if v == nil {
		return nil, store.ErrNotFound
	}
	f, err := stringList(v)
	if err != nil || len(f) != 3 {
		return nil, fmt.Errorf("redisstore: process command: unexpected reply %v", v)
	}
	return processRow(p.ID, f[0], f[1], f[2])
}

// ProcessDelete deletes a process's entries. See store.Store.
func (s *Store) ProcessDelete(ctx context.Context, p *store.ProcessDeleteParams) error {
	_, err := s.fcall(ctx, "sortie_process_delete", s.k.procs(), s.arg0, p.ID)
	return err
}

// ProcessList reads the registry in one pipeline. See store.Store.
func (s *Store) ProcessList(ctx context.Context, _ *store.ProcessListParams) ([]*store.ProcessRow, error) {
	pipe := s.rdb.Pipeline()
	data := pipe.HGetAll(ctx, s.k.procs())
	cmds := pipe.HGetAll(ctx, s.k.procKey("cmd"))
	scores := pipe.ZRangeWithScores(ctx, s.k.procKey("beat"), 0, -1)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, s.readError("list processes", err)
	}
	beatOf := map[string]string{}
	for _, z := range scores.Val() {
		beatOf[z.Member.(string)] = strconv.FormatFloat(z.Score, 'f', 0, 64)
	}
	var out []*store.ProcessRow
	for id, d := range data.Val() {
		row, err := processRow(id, d, beatOf[id], cmds.Val()[id])
		if err != nil {
			return nil, err
		}
		out = append(out, row)
	}
	registry.Sort(out)
	return out, nil
}

// processRow decodes one process's entries.
func processRow(id, data, beat, cmd string) (*store.ProcessRow, error) {
	row := &store.ProcessRow{ID: id, Quiet: strings.Contains(cmd, "q"), Stop: strings.Contains(cmd, "s")}
	if us, err := strconv.ParseInt(beat, 10, 64); err == nil {
		row.LastBeat = time.UnixMicro(us).UTC()
	}
	if err := registry.Decode([]byte(data), row); err != nil {
		return nil, fmt.Errorf("redisstore: %w", err)
	}
	return row, nil
}
