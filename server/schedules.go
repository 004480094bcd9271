package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentichost/agentic/schedule"
	"github.com/agentichost/agentic/storage"
)

// ScheduleConfig is a message the service sends into one of the tenant's
// sessions at each occurrence of a cron expression (package schedule):
// an ordinary message, accepted as one sent through the API, with the
// request id "schedule:ID@TIME" (the occurrence, in UTC, RFC 3339).
type ScheduleConfig struct {
	// ID names the schedule: 1 to 128 of [A-Za-z0-9._:-]. Required.
	ID string `yaml:"id"`
	// Session is the session the message goes into. Required.
	Session string `yaml:"session"`
	// Agent answers it: one of the tenant's agents. Default: "", the
	// tenant's default agent.
	Agent string `yaml:"agent"`
	// Cron is a standard five-field expression ("0 8 * * *": every day
	// at 08:00), or a descriptor (@daily, @every 1h30m). Required.
	Cron string `yaml:"cron"`
	// Timezone is the IANA time zone Cron is read in ("Europe/Paris").
	// Default: "", UTC.
	Timezone string `yaml:"timezone"`
	// Text is the message. Required.
	Text string `yaml:"text"`
	// Missed is what becomes of the occurrences that passed while no host
	// ran: "run_once" sends the latest once when a host starts, "skip"
	// sends none. Default: "", which means run_once.
	Missed string `yaml:"missed"`
}

// schedule is c as package schedule takes it.
func (c ScheduleConfig) schedule() schedule.Schedule {
	return schedule.Schedule{ID: c.ID, Session: c.Session, Agent: c.Agent, Cron: c.Cron, Timezone: c.Timezone, Text: c.Text, Missed: c.Missed}
}

// validateSchedules returns every problem of a tenant's schedules, its
// agents known, each prefixed with the schedule's place in the list.
func validateSchedules(list []ScheduleConfig, agents map[string]AgentConfig) []string {
	var bad []string
	seen := map[string]bool{}
	for i, c := range list {
		at := fmt.Sprintf("schedules[%d]", i)
		if c.ID != "" {
			at += " (" + c.ID + ")"
		}
		if seen[c.ID] && c.ID != "" {
			bad = append(bad, fmt.Sprintf("%s: the id %s is taken", at, c.ID))
		}
		seen[c.ID] = true
		for _, p := range scheduleProblems(c, agents) {
			bad = append(bad, at+": "+p)
		}
	}
	return bad
}

// scheduleProblems returns every problem of one schedule.
func scheduleProblems(c ScheduleConfig, agents map[string]AgentConfig) []string {
	var bad []string
	if err := c.schedule().Validate(); err != nil {
		for _, e := range unjoin(err) {
			bad = append(bad, e.Error())
		}
	}
	if _, ok := agents[c.Agent]; c.Agent != "" && !ok {
		bad = append(bad, fmt.Sprintf("agent %q is not among the tenant's agents", c.Agent))
	}
	return bad
}

// scheduleTextProblem says that c's text is longer than max bytes.
func scheduleTextProblem(c ScheduleConfig, max int) string {
	return fmt.Sprintf("text is %d bytes, at most %d (max_schedule_text_bytes; each occurrence appends it to the session's ledger)", len(c.Text), max)
}

// unjoin returns the errors errors.Join joined into err, or err alone.
func unjoin(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// newSchedules builds a tenant's schedule runner: its configuration's
// schedules, and those made through the API, kept in the tenant's
// storage. On a shared storage one host at a time fires a tenant's
// schedules, under a lease on the server's storage named schedules.TENANT
// (no tenant's session has an id without its prefix's ':').
func (s *Server) newSchedules(t *tenant, opts Options) (*schedule.Runner, error) {
	so := schedule.Options{Host: t.host, Storage: t.storage, Agents: t.agents,
		LeaseID: "schedules." + t.name, LeaseTTL: time.Duration(s.cfg.LeaseTTL), Owner: hostIDOf(s.cfg.HostID) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		Poll: opts.schedulePoll, Now: opts.scheduleNow, Logger: s.log.With("tenant", t.name),
		// An occurrence is admitted as a message of the API is; a text
		// past the bound (a schedule kept before it, or a bound lowered
		// since) is not sent.
		Admit: func(ctx context.Context, sc schedule.Schedule) (func(), error) {
			if len(sc.Text) > s.cfg.MaxScheduleTextBytes {
				return nil, errors.New(scheduleTextProblem(ScheduleConfig{Text: sc.Text}, s.cfg.MaxScheduleTextBytes) + ": replace the schedule with a shorter text")
			}
			return s.admitSource(ctx, t, sc.Session, sourceSchedule)
		}}
	// The lease is the server's storage's: the tenant's prefix of it
	// would lease a session of the tenant's.
	// Without one (a storage a single host uses), the tenant's prefix
	// has none either, and the runner takes no lease.
	so.Leaser, _ = s.store.(storage.Leaser)
	for _, c := range t.cfg.Schedules {
		so.Schedules = append(so.Schedules, c.schedule())
	}
	return schedule.New(so)
}

// runSchedules fires the tenants' schedules until the server drains.
func (s *Server) runSchedules() {
	ctx, stop := context.WithCancel(context.Background())
	s.stopSchedules = func() {
		stop()
		s.schedules.Wait()
	}
	for _, t := range s.tenants {
		s.schedules.Go(func() { t.schedules.Run(ctx) })
	}
}

// scheduleView is a schedule as the API shows it.
type scheduleView struct {
	ID       string `json:"id"`
	Session  string `json:"session"`
	Agent    string `json:"agent"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	Text     string `json:"text"`
	Missed   string `json:"missed"`
	// Source is "config" (read-only through the API) or "api".
	Source string `json:"source"`
	// Next is the first occurrence after now.
	Next time.Time `json:"next"`
	// Last is the last occurrence dealt with; null: none yet.
	Last *schedule.Fired `json:"last"`
}

func (t *tenant) scheduleView(st schedule.State) scheduleView {
	v := scheduleView{ID: st.ID, Session: st.Session, Agent: st.Agent, Cron: st.Cron, Timezone: st.Timezone, Text: st.Text,
		Missed: st.Missed, Source: "api", Next: st.Next, Last: st.Last}
	if v.Agent == "" {
		v.Agent = t.def.Name
	}
	if v.Timezone == "" {
		v.Timezone = "UTC"
	}
	if v.Missed == "" {
		v.Missed = schedule.MissedRunOnce
	}
	if st.Fixed {
		v.Source = "config"
	}
	return v
}

// listSchedules lists the tenant's schedules, the configuration's first.
func (s *Server) listSchedules(w http.ResponseWriter, r *http.Request, t *tenant) {
	states, err := t.schedules.States(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read the schedules: %v", err)
		return
	}
	out := struct {
		Schedules []scheduleView `json:"schedules"`
	}{Schedules: []scheduleView{}}
	for _, st := range states {
		out.Schedules = append(out.Schedules, t.scheduleView(st))
	}
	writeJSON(w, http.StatusOK, out)
}

// scheduleRequest is the body of POST /v1/schedules.
type scheduleRequest struct {
	ID       string `json:"id"`
	Session  string `json:"session"`
	Agent    string `json:"agent"`
	Cron     string `json:"cron"`
	Timezone string `json:"timezone"`
	Text     string `json:"text"`
	Missed   string `json:"missed"`
}

// postSchedule makes a schedule, or replaces one made before (its first
// occurrence is then the first after now), kept in the storage: every
// host sharing it fires it, once.
func (s *Server) postSchedule(w http.ResponseWriter, r *http.Request, t *tenant) {
	var req scheduleRequest
	if !s.decodeBody(w, r, &req) {
		return
	}
	c := ScheduleConfig(req)
	bad := scheduleProblems(c, t.cfg.Agents)
	if len(c.Text) > s.cfg.MaxScheduleTextBytes {
		bad = append(bad, scheduleTextProblem(c, s.cfg.MaxScheduleTextBytes))
	}
	if len(bad) > 0 {
		writeError(w, http.StatusBadRequest, codeInvalid, "%s", strings.Join(bad, "; "))
		return
	}
	if slices.ContainsFunc(t.cfg.Schedules, func(sc ScheduleConfig) bool { return sc.ID == c.ID }) {
		writeError(w, http.StatusConflict, codeConflict, "schedule %s comes from the configuration: change it there", c.ID)
		return
	}
	// The count and the put take turns, so that posts at once cannot all
	// pass max_schedules (on this host; hosts sharing the storage may
	// each add one past it at once).
	t.schedulesMu.Lock()
	defer t.schedulesMu.Unlock()
	before, err := t.schedules.List(r.Context())
	replaces := slices.ContainsFunc(before, func(sc schedule.Schedule) bool { return sc.ID == c.ID })
	if err == nil && !replaces && len(before) >= s.cfg.MaxSchedules {
		writeError(w, http.StatusConflict, codeConflict, "tenant %s has %d schedules, its limit (max_schedules): delete one first", t.name, len(before))
		return
	}
	if err == nil {
		err = t.schedules.Put(r.Context(), c.schedule())
	}
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot keep the schedule: %v", err)
		return
	}
	status := http.StatusCreated
	if replaces {
		status = http.StatusOK
	}
	states, err := t.schedules.States(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read the schedules: %v", err)
		return
	}
	for _, st := range states {
		if st.ID == c.ID {
			writeJSON(w, status, t.scheduleView(st))
			return
		}
	}
	// Deleted by another request meanwhile.
	notFound(w, "schedule", c.ID)
}

// deleteSchedule removes a schedule made through the API.
func (s *Server) deleteSchedule(w http.ResponseWriter, r *http.Request, t *tenant) {
	id := r.PathValue("id")
	if !storage.ValidSessionID(id) {
		writeError(w, http.StatusBadRequest, codeInvalid, "schedule id %q: want 1 to 128 of [A-Za-z0-9._:-], not starting with '.'", id)
		return
	}
	err := t.schedules.Delete(r.Context(), id)
	switch {
	case errors.Is(err, schedule.ErrFixed):
		writeError(w, http.StatusConflict, codeConflict, "schedule %s comes from the configuration: remove it there", id)
	case errors.Is(err, schedule.ErrNotFound):
		notFound(w, "schedule", id)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot remove the schedule: %v", err)
	default:
		writeJSON(w, http.StatusOK, map[string]any{"id": id, "deleted": true})
	}
}
