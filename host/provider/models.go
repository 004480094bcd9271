package provider

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/openai/openai-go/v3"
)

// ModelsRefetchAfter is how old the memoized model list must be before
// [Client.ContextWindow] fetches it again for a model it does not name.
const ModelsRefetchAfter = 10 * time.Minute

// models memoizes the endpoint's model list.
type models struct {
	lock    chan struct{} // held while reading or fetching; a channel so that waiting honours ctx
	now     func() time.Time
	fetched time.Time
	windows map[string]int // model id → context window; 0 when the list names none
}

// ContextWindow returns the context window, in tokens, of model as the
// endpoint's model list (GET BaseURL/models) states it: the primary
// provider's top_provider.context_length, else the model's context_length.
//
// The list is fetched once and memoized; it is fetched again only for a
// model it does not name, and only when it is older than
// [ModelsRefetchAfter]. A model the list does not name, or names without a
// context length, is [ErrUnknownModel]. A failed fetch is not memoized; an
// HTTP error is an [*model.Error]. ContextWindow is safe for concurrent use.
func (c *Client) ContextWindow(ctx context.Context, model string) (int, error) {
	m := &c.models
	select {
	case m.lock <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-m.lock }()

	if m.windows != nil {
		if w, ok := m.windows[model]; ok {
			return window(model, w)
		}
		if m.now().Sub(m.fetched) < ModelsRefetchAfter {
			return 0, fmt.Errorf("%w: %q is not in the model list of %s", ErrUnknownModel, model, c.baseURL)
		}
	}
	windows, err := c.fetchModels(ctx)
	if err != nil {
		return 0, err
	}
	m.windows, m.fetched = windows, m.now()
	if w, ok := windows[model]; ok {
		return window(model, w)
	}
	return 0, fmt.Errorf("%w: %q is not in the model list of %s", ErrUnknownModel, model, c.baseURL)
}

func window(model string, w int) (int, error) {
	if w <= 0 {
		return 0, fmt.Errorf("%w: the model list gives %q no context length", ErrUnknownModel, model)
	}
	return w, nil
}

// fetchModels gets the model list and maps ids (and canonical slugs) to
// context windows. Entries it cannot read are skipped.
func (c *Client) fetchModels(ctx context.Context) (map[string]int, error) {
	var body []byte
	if err := c.api.Get(ctx, "models", nil, &body); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		var apiErr *openai.Error
		if errors.As(err, &apiErr) {
			return nil, fromAPIError(apiErr, time.Now())
		}
		return nil, fmt.Errorf("provider: listing models: %w", err)
	}
	var list struct {
		Data []json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &list); err != nil {
		return nil, fmt.Errorf("provider: listing models: %w", err)
	}
	windows := make(map[string]int, len(list.Data))
	for _, raw := range list.Data {
		var e struct {
			ID            string          `json:"id"`
			CanonicalSlug string          `json:"canonical_slug"`
			ContextLength json.RawMessage `json:"context_length"`
			TopProvider   struct {
				ContextLength json.RawMessage `json:"context_length"`
			} `json:"top_provider"`
		}
		if json.Unmarshal(raw, &e) != nil || e.ID == "" {
			continue
		}
		w := intOf(e.TopProvider.ContextLength)
		if w <= 0 {
			w = intOf(e.ContextLength)
		}
		if w < 0 || w > 1<<40 {
			w = 0
		}
		windows[e.ID] = int(w)
		if e.CanonicalSlug != "" {
			if _, taken := windows[e.CanonicalSlug]; !taken {
				windows[e.CanonicalSlug] = int(w)
			}
		}
	}
	return windows, nil
}
