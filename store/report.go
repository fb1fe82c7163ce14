package store

import "fmt"

// Valid reports whether k is a known report kind.
func (k ReportKind) Valid() bool {
	return k >= ReportCompleted && k <= ReportReleased
}

// ValidateReports checks the reports of a JobFinish: none is nil, each has
// a known kind, and only a release says its job never started. Every store
// calls it before applying any, so a bad report applies nothing.
func ValidateReports(reports []*Report) error {
	for i, o := range reports {
		if o == nil {
			return fmt.Errorf("report %d of %d is nil: %w", i+1, len(reports), ErrInvalidArgument)
		}
		if !o.Kind.Valid() {
			return fmt.Errorf("report %d of %d (job %d) has unknown kind %v: %w", i+1, len(reports), o.ID, o.Kind, ErrInvalidArgument)
		}
		if o.Unstarted && o.Kind != ReportReleased {
			return fmt.Errorf("report %d of %d (job %d) is %v and Unstarted, which goes with released only: %w", i+1, len(reports), o.ID, o.Kind, ErrInvalidArgument)
		}
	}
	return nil
}
