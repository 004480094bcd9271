package server

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"

	"github.com/agentichost/agentic/host"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/plugins"
)

// replayRequest is the body of POST /v1/sessions/{id}/replay.
type replayRequest struct {
	// CallID replays one call; "" all the session's plugin tool calls.
	CallID string `json:"call_id,omitempty"`
}

// replayResponse is its answer.
type replayResponse struct {
	SessionID string           `json:"session_id"`
	Replays   []plugins.Replay `json:"replays"`
	// Diverged tells that a call's replay diverged.
	Diverged bool `json:"diverged"`
}

// replaySession runs the session's recorded plugin tool calls again on the
// modules of their recorded hashes — the version serving, or one the
// registry keeps — with their host functions answered from the traffic
// recorded with each result: no network, no key-value write.
func (s *Server) replaySession(w http.ResponseWriter, r *http.Request, t *tenant) {
	id, ok := sessionID(w, r)
	if !ok {
		return
	}
	var req replayRequest
	if !s.decodeOptionalBody(w, r, &req) || !s.exists(w, r, t, id) {
		return
	}
	events, err := t.host.Session(id).ResolvedEvents(r.Context())
	if err != nil {
		readError(w, id, err)
		return
	}
	var calls []ledger.RecordedCall
	for _, c := range ledger.RecordedCalls(events) {
		if strings.HasPrefix(c.Result.Source, "sha256:") && (req.CallID == "" || c.Call.ID == req.CallID) {
			calls = append(calls, c)
		}
	}
	if len(calls) == 0 {
		what := "plugin tool calls"
		if req.CallID != "" {
			what = fmt.Sprintf("plugin tool call %q", req.CallID)
		}
		writeError(w, http.StatusNotFound, codeNotFound, "session %s has no %s", id, what)
		return
	}
	out := replayResponse{SessionID: id, Replays: []plugins.Replay{}}
	modules := map[string]*plugins.Module{} // hash → module
	var kept []*plugins.Module              // loaded for the replay, closed after it
	defer func() {
		for _, m := range kept {
			_ = m.Close(context.WithoutCancel(r.Context()))
		}
	}()
	for _, c := range calls {
		m, why := s.replayModule(r.Context(), t, c.Result.Source, modules, &kept)
		if m == nil {
			out.Replays = append(out.Replays, plugins.Replay{CallID: c.Call.ID, Tool: c.Call.Name, Verdict: plugins.ReplayNotReplayable,
				RecordedSource: c.Result.Source, Reason: why})
			continue
		}
		args := c.Call.Arguments
		if strings.TrimSpace(args) == "" {
			args = "{}"
		}
		rp, err := plugins.ReplayCall(r.Context(), m, host.ToolCall{ID: c.Call.ID, SessionID: id, Name: c.Call.Name, Input: json.RawMessage(args)}, c.Result)
		if err != nil {
			writeError(w, http.StatusInternalServerError, codeInternal, "replaying %s: %v", c.Call.ID, err)
			return
		}
		out.Diverged = out.Diverged || rp.Verdict == plugins.ReplayDiverged
		out.Replays = append(out.Replays, rp)
	}
	writeJSON(w, http.StatusOK, out)
}

// replayModule finds the tenant's module of hash: one serving, or a version
// the registry keeps, loaded for the replay (and added to kept); nil and
// why when there is none.
func (s *Server) replayModule(ctx context.Context, t *tenant, hash string, modules map[string]*plugins.Module, kept *[]*plugins.Module) (*plugins.Module, string) {
	if m, ok := modules[hash]; ok {
		return m, ""
	}
	if s.registry == nil {
		return nil, "this server runs no plugins"
	}
	names := map[string]bool{}
	for _, m := range s.registry.Modules(t.name) {
		if m.Hash() == hash {
			modules[hash] = m
			return m, ""
		}
		names[m.Name()] = true
	}
	for name := range names {
		src, ok := s.registry.VersionSource(t.name, name, hash)
		if !ok {
			continue
		}
		src.Tenant, src.Limits, src.Config, src.ForReplay = t.name, s.cfg.Tenants[t.name].Sandbox.limits(), s.cfg.Tenants[t.name].PluginConfig[name], true
		m, err := s.rt.Load(ctx, src)
		if err != nil {
			return nil, fmt.Sprintf("its module %s (a version of %s) does not load: %v", hash, name, err)
		}
		modules[hash] = m
		*kept = append(*kept, m)
		return m, ""
	}
	return nil, fmt.Sprintf("its module %s is neither serving nor among the versions kept", hash)
}
