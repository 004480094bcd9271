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

	"github.com/agentichost/agentic/plugins"
	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/webhook"
)

// validate checks a tenant's webhooks against its sandbox, and reads the
// secret.
func (w *WebhooksConfig) validate(sandbox plugins.Limits, getenv func(string) string) []string {
	var bad []string
	if len(w.Endpoints) == 0 {
		bad = append(bad, "endpoints: none")
	}
	for i, e := range w.Endpoints {
		if e.URL == "" {
			bad = append(bad, fmt.Sprintf("endpoints[%d]: url is required", i))
		} else if sandbox.Allows(e.URL) != nil {
			bad = append(bad, fmt.Sprintf("endpoints[%d]: the host of url %s is not among the tenant's sandbox.allowed_hosts", i, redactURL(e.URL)))
		}
		for _, typ := range e.Events {
			if !slices.Contains(webhook.Types(), typ) {
				bad = append(bad, fmt.Sprintf("endpoints[%d]: unknown event %q (want %s)", i, typ, strings.Join(webhook.Types(), ", ")))
			}
		}
	}
	if w.RetryFor < 0 {
		bad = append(bad, "retry_for is negative")
	}
	sc := SecretConfig{Value: w.Secret, ValueEnv: w.SecretEnv, ValueFile: w.SecretFile}
	if err := sc.resolve(getenv); err != nil {
		bad = append(bad, "the secret: "+strings.NewReplacer("value_env", "secret_env", "value_file", "secret_file", "value", "secret").Replace(err.Error()))
	} else if len(sc.resolved) < 16 {
		bad = append(bad, "the secret: want at least 16 bytes")
	}
	w.secret = []byte(sc.resolved)
	return bad
}

// newOutbox builds a tenant's webhook outbox, when it has webhooks: on a
// shared storage, one host at a time sends a tenant's deliveries, under a
// lease on the server's storage named webhooks.TENANT (no tenant's
// session has an id without its prefix's ':').
func (s *Server) newOutbox(t *tenant) (*webhook.Outbox, error) {
	w := t.cfg.Webhooks
	if w == nil {
		return nil, nil
	}
	sb := t.cfg.Sandbox
	client, err := plugins.EgressClient(plugins.Limits{AllowedHosts: sb.AllowedHosts, AllowPrivateNetwork: sb.AllowPrivateNetwork})
	if err != nil {
		return nil, err
	}
	opts := webhook.Options{Storage: t.storage, Secret: w.secret, Tenant: t.name, Client: client,
		LeaseID: "webhooks." + t.name, LeaseTTL: time.Duration(s.cfg.LeaseTTL), Owner: hostIDOf(s.cfg.HostID) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36),
		RetryFor: time.Duration(w.RetryFor), Logger: s.log.With("tenant", t.name)}
	opts.Leaser, _ = s.store.(storage.Leaser)
	if opts.Leaser == nil {
		opts.LeaseID = ""
	}
	for _, e := range w.Endpoints {
		opts.Endpoints = append(opts.Endpoints, webhook.Endpoint{URL: e.URL, Events: e.Events})
	}
	return webhook.New(opts)
}

// webhookInfo is an endpoint as GET /v1/webhooks shows it.
type webhookInfo struct {
	URL    string   `json:"url"`
	Events []string `json:"events"`
}

// listWebhooks lists the tenant's endpoints, and counts what waits.
func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request, t *tenant) {
	out := struct {
		Endpoints []webhookInfo `json:"endpoints"`
		Waiting   int           `json:"waiting"`
	}{Endpoints: []webhookInfo{}}
	if t.outbox != nil {
		for _, e := range t.outbox.Endpoints() {
			events := e.Events
			if len(events) == 0 {
				events = webhook.Types()
			}
			out.Endpoints = append(out.Endpoints, webhookInfo{URL: redactURL(e.URL), Events: events})
		}
		n, err := t.outbox.Waiting(r.Context())
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read the outbox: %v", err)
			return
		}
		out.Waiting = n
	}
	writeJSON(w, http.StatusOK, out)
}

// wireDelivery is a delivery as the API shows it: its endpoints' URLs
// without credentials or query.
func wireDelivery(d webhook.Delivery) webhook.Delivery {
	d.Targets = slices.Clone(d.Targets)
	for i := range d.Targets {
		d.Targets[i].URL = redactURL(d.Targets[i].URL)
	}
	return d
}

// listDeliveries lists the tenant's webhook deliveries, newest first.
func (s *Server) listDeliveries(w http.ResponseWriter, r *http.Request, t *tenant) {
	q := webhook.Query{State: r.URL.Query().Get("state"), Limit: 100}
	switch q.State {
	case "", webhook.StatePending, webhook.StateDelivered, webhook.StateFailed:
	default:
		writeError(w, http.StatusBadRequest, codeInvalid, "state: want pending, delivered or failed, got %q", q.State)
		return
	}
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, codeInvalid, "limit: want 1 to 1000, got %q", v)
			return
		}
		q.Limit = n
	}
	out := struct {
		Deliveries []webhook.Delivery `json:"deliveries"`
	}{Deliveries: []webhook.Delivery{}}
	if t.outbox != nil {
		list, err := t.outbox.Deliveries(r.Context(), q)
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read the outbox: %v", err)
			return
		}
		for _, d := range list {
			out.Deliveries = append(out.Deliveries, wireDelivery(d))
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// getDelivery shows one delivery.
func (s *Server) getDelivery(w http.ResponseWriter, r *http.Request, t *tenant) {
	id := r.PathValue("id")
	if !storage.ValidSessionID(id) {
		writeError(w, http.StatusBadRequest, codeInvalid, "the delivery id %q is not valid", id)
		return
	}
	if t.outbox == nil {
		writeError(w, http.StatusNotFound, codeNotFound, "no delivery %s", id)
		return
	}
	d, err := t.outbox.Delivery(r.Context(), id)
	switch {
	case errors.Is(err, webhook.ErrNotFound):
		writeError(w, http.StatusNotFound, codeNotFound, "no delivery %s", id)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, codeUnavailable, "cannot read the outbox: %v", err)
	default:
		writeJSON(w, http.StatusOK, wireDelivery(d))
	}
}

// runOutbox sends the tenant's deliveries until ctx ends.
func (s *Server) runOutbox(ctx context.Context, t *tenant) {
	if t.outbox == nil {
		return
	}
	s.bg.Go(func() { t.outbox.Run(ctx) })
}
