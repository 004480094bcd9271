package server

import (
	"cmp"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage"
)

// GET /v1/usage: what the tenant's model calls consumed and cost over the
// last ?days (1 to 90, default 14, counted in UTC days, today included),
// per day, per session and per agent, beside the tenant's daily budget;
// and its tool calls per tool and code (a plugin's hash), with the latest
// calls. Every figure carries the fuel of the tenant's plugins — their
// tools', their validators' and their policies' — its plugins' CPU. It is computed from the ledgers of every session of the tenant,
// so it costs a read of each: it is for a console or a report, not for a
// hot path.

// usageFigures is usage summed over model calls, and the fuel of the
// metered tool calls (the CPU of the tenant's plugins).
type usageFigures struct {
	Usage ledger.Usage `json:"usage"`
	Cost  float64      `json:"cost"`
	Steps int          `json:"steps"`
	Fuel  int64        `json:"fuel"`
}

func (f *usageFigures) add(u ledger.Usage, step bool) {
	f.Usage = f.Usage.Add(u)
	f.Cost += u.Billed()
	if step {
		f.Steps++
	}
}

type usageDay struct {
	Day string `json:"day"`
	usageFigures
}

type usageSession struct {
	SessionID    string    `json:"session_id"`
	LastActivity time.Time `json:"last_activity,omitzero"`
	usageFigures
}

type usageAgent struct {
	Agent    string `json:"agent"`
	Sessions int    `json:"sessions"`
	usageFigures
}

// usageModel is the usage of one model: the steps it answered, and the
// compactions and other model calls of runs on it.
type usageModel struct {
	Model string `json:"model"`
	usageFigures
}

// toolUsage counts the calls of one tool by one piece of code.
type toolUsage struct {
	Name       string `json:"name"`
	Source     string `json:"source,omitempty"`
	Calls      int    `json:"calls"`
	Errors     int    `json:"errors"`
	DurationMS int64  `json:"duration_ms"`
	Fuel       int64  `json:"fuel"`
	// PolicyFuel is the fuel the metered policies used deciding on the
	// tool's calls.
	PolicyFuel int64     `json:"policy_fuel,omitempty"`
	Last       time.Time `json:"last,omitzero"`
}

// toolCall is one of the latest tool calls.
type toolCall struct {
	SessionID  string    `json:"session_id"`
	RunID      string    `json:"run_id,omitempty"`
	CallID     string    `json:"call_id"`
	Name       string    `json:"name"`
	Source     string    `json:"source,omitempty"`
	IsError    bool      `json:"is_error,omitempty"`
	DurationMS int64     `json:"duration_ms,omitempty"`
	Fuel       int64     `json:"fuel,omitempty"`
	PolicyFuel int64     `json:"policy_fuel,omitempty"`
	Time       time.Time `json:"time"`
}

// latestCalls is how many of the latest tool calls GET /v1/usage lists.
const latestCalls = 50

type usageResponse struct {
	Tenant string    `json:"tenant"`
	Since  time.Time `json:"since"`
	Budget struct {
		// USDPerDay is the tenant's daily budget; 0: none.
		USDPerDay float64 `json:"usd_per_day"`
		// SpentToday is what the budget counted today (every host's
		// share), or, without a budget, today's cost in the ledgers.
		SpentToday float64 `json:"spent_today"`
	} `json:"budget"`
	Total    usageFigures   `json:"total"`
	Days     []usageDay     `json:"days"`
	Sessions []usageSession `json:"sessions"`
	Agents   []usageAgent   `json:"agents"`
	Models   []usageModel   `json:"models"`
	Tools    []toolUsage    `json:"tools"`
	Calls    []toolCall     `json:"calls"`
	// Damaged are the sessions whose ledgers do not load (storage.ErrCorrupt):
	// left out of the figures, each with where its damage is.
	Damaged []damagedSession `json:"damaged,omitempty"`
}

// damagedSession is a session usage leaves out: its ledger does not load.
type damagedSession struct {
	SessionID string `json:"session_id"`
	Reason    string `json:"reason"`
}

func (s *Server) getUsage(w http.ResponseWriter, r *http.Request, t *tenant) {
	days := 14
	if v := r.URL.Query().Get("days"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 90 {
			writeError(w, http.StatusBadRequest, codeInvalid, "days %q: want 1 to 90", v)
			return
		}
		days = n
	}
	ids, err := t.store().(storage.Lister).ListSessions(r.Context())
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot list the sessions: %v", err)
		return
	}
	slices.Sort(ids)
	today := time.Now().UTC().Truncate(24 * time.Hour)
	since := today.AddDate(0, 0, -(days - 1))
	out := usageResponse{Tenant: t.name, Since: since, Days: make([]usageDay, days),
		Sessions: []usageSession{}, Agents: []usageAgent{}, Models: []usageModel{}, Tools: []toolUsage{}, Calls: []toolCall{}}
	for i := range out.Days {
		out.Days[i].Day = since.AddDate(0, 0, i).Format(time.DateOnly)
	}
	agents := map[string]*usageAgent{}
	models := map[string]*usageModel{}
	type toolKey struct{ name, source string }
	tools := map[toolKey]*toolUsage{}
	for _, id := range ids {
		events, err := t.host.Session(id).Events(r.Context())
		if errors.Is(err, storage.ErrCorrupt) {
			out.Damaged = append(out.Damaged, damagedSession{SessionID: id, Reason: err.Error()})
			continue
		}
		if err != nil {
			readError(w, id, err)
			return
		}
		sess := usageSession{SessionID: id}
		agentOf := map[string]string{} // run id → agent
		modelOf := map[string]string{} // run id → the agent's model
		counted := map[string]bool{}   // agents this session counted in
		for _, e := range events {
			if e.Time.After(sess.LastActivity) {
				sess.LastActivity = e.Time
			}
			if e.RunStart != nil {
				agentOf[e.RunID] = cmp.Or(e.RunStart.Agent, "default")
				modelOf[e.RunID] = e.RunStart.Model
			}
			if e.Time.Before(since) {
				continue
			}
			if res := e.ToolResult; res != nil {
				k := toolKey{res.Name, res.Source}
				tu := tools[k]
				if tu == nil {
					tu = &toolUsage{Name: k.name, Source: k.source}
					tools[k] = tu
				}
				tu.Calls++
				if res.IsError {
					tu.Errors++
				}
				tu.DurationMS += res.DurationMS
				tu.Fuel += res.Fuel
				tu.PolicyFuel += res.PolicyFuel
				if e.Time.After(tu.Last) {
					tu.Last = e.Time
				}
				out.Calls = append(out.Calls, toolCall{SessionID: id, RunID: e.RunID, CallID: res.CallID, Name: k.name,
					Source: res.Source, IsError: res.IsError, DurationMS: res.DurationMS, Fuel: res.Fuel, PolicyFuel: res.PolicyFuel, Time: e.Time})
			}
			if fuel := e.PluginFuel(); fuel > 0 {
				sess.Fuel += fuel
				out.Total.Fuel += fuel
				if d := int(e.Time.UTC().Sub(since) / (24 * time.Hour)); d >= 0 && d < days {
					out.Days[d].Fuel += fuel
				}
				a := cmp.Or(agentOf[e.RunID], "default")
				au := agents[a]
				if au == nil {
					au = &usageAgent{Agent: a}
					agents[a] = au
				}
				au.Fuel += fuel
				if !counted[a] {
					counted[a] = true
					au.Sessions++
				}
			}
			u, step, ok := e.ModelUsage()
			if !ok {
				continue
			}
			sess.add(u, step)
			out.Total.add(u, step)
			if d := int(e.Time.UTC().Sub(since) / (24 * time.Hour)); d >= 0 && d < days {
				out.Days[d].add(u, step)
			}
			a := cmp.Or(agentOf[e.RunID], "default")
			au := agents[a]
			if au == nil {
				au = &usageAgent{Agent: a}
				agents[a] = au
			}
			au.add(u, step)
			if !counted[a] {
				counted[a] = true
				au.Sessions++
			}
			// A step names the model that answered it (a fallback's, when
			// the agent's model failed); another model call is counted
			// on its run's model.
			m := modelOf[e.RunID]
			if e.Step != nil && e.Step.Model != "" {
				m = e.Step.Model
			}
			m = cmp.Or(m, "unknown")
			mu := models[m]
			if mu == nil {
				mu = &usageModel{Model: m}
				models[m] = mu
			}
			mu.add(u, step)
		}
		if sess.Steps > 0 || sess.Usage.TotalTokens > 0 || sess.Fuel > 0 {
			out.Sessions = append(out.Sessions, sess)
		}
	}
	slices.SortStableFunc(out.Sessions, func(a, b usageSession) int { return cmp.Compare(b.Cost, a.Cost) })
	for _, a := range agents {
		out.Agents = append(out.Agents, *a)
	}
	slices.SortFunc(out.Agents, func(a, b usageAgent) int { return cmp.Compare(a.Agent, b.Agent) })
	for _, m := range models {
		out.Models = append(out.Models, *m)
	}
	slices.SortFunc(out.Models, func(a, b usageModel) int { return cmp.Or(cmp.Compare(b.Cost, a.Cost), cmp.Compare(a.Model, b.Model)) })
	for _, tu := range tools {
		out.Tools = append(out.Tools, *tu)
	}
	slices.SortFunc(out.Tools, func(a, b toolUsage) int {
		return cmp.Or(cmp.Compare(a.Name, b.Name), b.Last.Compare(a.Last), cmp.Compare(a.Source, b.Source))
	})
	slices.SortStableFunc(out.Calls, func(a, b toolCall) int { return b.Time.Compare(a.Time) })
	out.Calls = out.Calls[:min(len(out.Calls), latestCalls)]
	if t.budget != nil {
		out.Budget.USDPerDay = t.budget.limit
		spent, err := t.budget.spent(r.Context())
		if err != nil {
			s.log.Warn("cannot read the budget's spend", "tenant", t.name, "err", err)
		}
		out.Budget.SpentToday = spent
	} else {
		out.Budget.SpentToday = out.Days[days-1].Cost
	}
	writeJSON(w, http.StatusOK, out)
}
