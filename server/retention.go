package server

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"time"

	"github.com/agentichost/agentic/retention"
	"github.com/agentichost/agentic/storage"
)

// Policy is the retention policy of tenant name: its archives go to
// ArchiveDir/name.
func (r *RetentionConfig) Policy(name string) retention.Policy {
	p := retention.Policy{KeepDays: r.KeepDays, KeepLast: r.KeepLast, Action: retention.Action(r.Action)}
	if r.ArchiveDir != "" {
		p.ArchiveDir = filepath.Join(r.ArchiveDir, name)
	}
	return p
}

// sweep applies the tenant's retention policy once.
func (s *Server) sweep(ctx context.Context, t *tenant) (retention.Report, error) {
	return retention.Sweep(ctx, retention.Options{Host: t.host, Storage: t.storage, Policy: t.cfg.Retention.Policy(t.name),
		Tenant: t.name, Logger: s.log.With("tenant", t.name)})
}

// runRetention sweeps the tenants that have a retention policy, each every
// its policy's Every, until the server closes.
func (s *Server) runRetention(ctx context.Context) {
	for _, t := range s.tenants {
		if t.cfg.Retention == nil {
			continue
		}
		s.bg.Add(1)
		go func() {
			defer s.bg.Done()
			tick := time.NewTicker(time.Duration(t.cfg.Retention.Every))
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				rep, err := s.sweep(ctx, t)
				if err != nil {
					s.log.Warn("retention sweep failed", "tenant", t.name, "err", err)
					continue
				}
				if len(rep.Archived)+len(rep.Deleted)+len(rep.Errors) > 0 {
					s.log.Info("retention sweep", "tenant", t.name, "archived", len(rep.Archived), "deleted", len(rep.Deleted),
						"skipped", len(rep.Skipped), "errors", len(rep.Errors))
				}
			}
		}()
	}
}

// sweepNow runs the tenant's retention sweep at once, answering its
// report.
func (s *Server) sweepNow(w http.ResponseWriter, r *http.Request, t *tenant) {
	var none struct{}
	if !s.decodeOptionalBody(w, r, &none) {
		return
	}
	if t.cfg.Retention == nil {
		writeError(w, http.StatusConflict, codeConflict, "tenant %s has no retention policy (retention: in its configuration)", t.name)
		return
	}
	rep, err := s.sweep(r.Context(), t)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, rep)
}

// putRetention sets (or, with an empty object, removes) a session's own
// retention: {"keep": true} or {"keep_days": N}.
func (s *Server) putRetention(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	var o retention.Override
	if !s.decodeBody(w, r, &o) || !s.exists(w, r, t, id) {
		return
	}
	if o.KeepDays < 0 {
		writeError(w, http.StatusBadRequest, codeInvalid, "keep_days must not be negative")
		return
	}
	if err := retention.SetOverride(r.Context(), t.storage.(storage.KV), id, o); err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		SessionID string `json:"session_id"`
		retention.Override
	}{id, o})
}

// forgetRetention removes a deleted session's override.
func (s *Server) forgetRetention(ctx context.Context, t *tenant, id string) error {
	kv, ok := t.storage.(storage.KV)
	if !ok {
		return errors.New("server: the storage keeps no values")
	}
	return retention.SetOverride(ctx, kv, id, retention.Override{})
}
