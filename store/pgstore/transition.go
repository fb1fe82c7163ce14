package pgstore

import (
	"fmt"
	"strings"

	"github.com/sortiehq/sortie/store"
	"github.com/sortiehq/sortie/store/internal/transition"
)

// finishSet returns the SET clauses of finish_jobs (schemaV2) that move a
// running job by its report: state, run_at, attempt, finalized_at and
// result, generated from transition.Rules, the one definition of outcome
// to next state (memstore and sqlitestore apply it in Go with
// transition.Next). In the statement, o is the report (kind, run_at, result)
// and j the job. finish_jobs is created from this text when the schema is
// made; a change of the table takes a new schema version that replaces the
// function, and TestFinishSQLFollowsTransitions checks the installed
// function against the table.
func finishSet() string {
	var state, runAt, uncount, final, result []string
	for _, t := range transition.Rules {
		if t.Kind == 0 {
			continue
		}
		kind := fmt.Sprintf("o.kind = %d", t.Kind)
		expr := sqlString(t.State)
		if t.Later != "" {
			expr = fmt.Sprintf("CASE WHEN o.run_at > p_now THEN %s ELSE %s END", sqlString(t.Later), expr)
		}
		if t.Exhausted != "" {
			expr = fmt.Sprintf("CASE WHEN j.attempt >= j.max_attempts THEN %s ELSE %s END", sqlString(t.Exhausted), expr)
		}
		state = append(state, fmt.Sprintf("WHEN %d THEN %s", t.Kind, expr))
		if t.SetsRunAt {
			runAt = append(runAt, guard(kind, t.Exhausted != "", "j.attempt < j.max_attempts"))
		}
		if t.Uncounts {
			uncount = append(uncount, kind)
		}
		if t.State.Finished() {
			final = append(final, guard(kind, t.Exhausted != "", "j.attempt < j.max_attempts"))
		}
		if t.Exhausted.Finished() {
			final = append(final, guard(kind, true, "j.attempt >= j.max_attempts"))
		}
		if t.Result {
			result = append(result, kind)
		}
	}
	return "\t\t\t\tstate = CASE o.kind " + strings.Join(state, " ") + " END,\n" +
		"\t\t\t\trun_at = CASE WHEN " + or(runAt) + " THEN o.run_at ELSE j.run_at END,\n" +
		"\t\t\t\tattempt = CASE WHEN " + or(uncount) + " THEN j.attempt - 1 ELSE j.attempt END,\n" +
		"\t\t\t\tfinalized_at = CASE WHEN " + or(final) + " THEN p_now END,\n" +
		"\t\t\t\tresult = CASE WHEN " + or(result) + " THEN o.result ELSE j.result END"
}

// guard returns cond, and also extra when on.
func guard(cond string, on bool, extra string) string {
	if !on {
		return cond
	}
	return "(" + cond + " AND " + extra + ")"
}

// or joins conditions with OR; none is false.
func or(conds []string) string {
	if len(conds) == 0 {
		return "false"
	}
	return strings.Join(conds, " OR ")
}

// sqlString quotes a state as an SQL string literal.
func sqlString(s store.JobState) string { return "'" + string(s) + "'" }

// finishOutcomes returns the history outcome of an outcome finish_jobs
// applied, generated from transition.Rules and transition.OutcomeOf: a CASE
// over the report's kind (u.kind) and the state it led to (u.state), NULL
// for one the history does not count. TestFinishSQLFollowsTransitions
// checks the installed function against it.
func finishOutcomes() string {
	var whens []string
	for _, t := range transition.Rules {
		if t.Kind == 0 {
			continue
		}
		for _, st := range []store.JobState{t.State, t.Exhausted, t.Later} {
			if o, ok := transition.OutcomeOf(st, t.Kind == store.ReportFailed); ok && st != "" {
				whens = append(whens, fmt.Sprintf("WHEN u.kind = %d AND u.state = %s THEN '%s'", t.Kind, sqlString(st), o))
			}
		}
	}
	return "CASE " + strings.Join(whens, " ") + " END"
}
