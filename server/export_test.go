package server

import (
	"context"
	"errors"
	"time"
)

// SetKeyClock makes the server read the time of its keys' expiry from now,
// for the tests of package server_test that expire a key without waiting.
// Set it before the server serves.
func SetKeyClock(s *Server, now func() time.Time) { s.keys.now = now }

// SetScheduleClock makes the servers built from opts read their schedules'
// occurrences on now, and look for due ones every poll.
func SetScheduleClock(opts *Options, now func() time.Time, poll time.Duration) {
	opts.scheduleNow, opts.schedulePoll = now, poll
}

// TickSchedules has every tenant's schedule runner fire what is due now,
// once.
func TickSchedules(s *Server) error {
	var errs []error
	for _, t := range s.tenants {
		errs = append(errs, t.schedules.Tick(context.Background()))
	}
	return errors.Join(errs...)
}

// SetUploadHook has the server call f once a module upload holds its
// places (the tenant's and the process's), before its body is read. Set
// it before the server serves.
func SetUploadHook(s *Server, f func()) { s.onUpload = f }

// RefreshAgreement has the server read the hosts' announcements of the
// ledger features they read now, rather than at its next renewal.
func RefreshAgreement(s *Server) error { return s.agreement.Refresh(context.Background()) }

// AuditNamespace is the key-value namespace of a tenant's audit log.
var AuditNamespace = auditNamespace
