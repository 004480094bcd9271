package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/agentichost/agentic/host/model"
)

// Transport is an http.RoundTripper for model endpoints that bounds the
// two waits a streamed response can hang on: the wait for its headers
// (HeaderTimeout) and the silence between two reads of its body
// (IdleTimeout). A request past either fails — its body's Read returns an
// error matching [model.ErrStalled] — instead of hanging; there is no
// overall timeout, which would cut long streams. It is the transport the
// Client uses, for programs that call a model endpoint without a Client
// (with openai-go, or plain net/http). The zero value bounds nothing and
// uses http.DefaultTransport.
type Transport struct {
	// Base makes the requests. Default: nil, http.DefaultTransport.
	Base http.RoundTripper
	// HeaderTimeout bounds the wait for the response headers after the
	// request was sent. Default: 0, none.
	HeaderTimeout time.Duration
	// IdleTimeout bounds the silence between two reads of the response
	// body. Default: 0, none.
	IdleTimeout time.Duration
}

// RoundTrip sends req, bounded as the Transport says.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	base := t.Base
	if base == nil {
		base = http.DefaultTransport
	}
	if t.HeaderTimeout <= 0 && t.IdleTimeout <= 0 {
		return base.RoundTrip(req)
	}
	ctx, cancel := context.WithCancelCause(req.Context())
	var headers *time.Timer
	if t.HeaderTimeout > 0 {
		headers = time.AfterFunc(t.HeaderTimeout, func() {
			cancel(fmt.Errorf("%w: no response headers within %s", model.ErrStalled, t.HeaderTimeout))
		})
	}
	res, err := base.RoundTrip(req.WithContext(ctx))
	if headers != nil && !headers.Stop() && err != nil {
		err = context.Cause(ctx)
	}
	if err != nil {
		cancel(nil)
		return nil, err
	}
	if t.IdleTimeout <= 0 {
		res.Body = &cancelBody{ReadCloser: res.Body, cancel: func() { cancel(nil) }}
		return res, nil
	}
	wd := &watchdog{d: t.IdleTimeout, fire: func() {
		cancel(fmt.Errorf("%w: no data for %s", model.ErrStalled, t.IdleTimeout))
	}}
	wd.start()
	res.Body = &cancelBody{ReadCloser: &watchedBody{ReadCloser: res.Body, wd: wd}, cancel: func() { wd.stop(); cancel(nil) },
		cause: func() error { return context.Cause(ctx) }}
	return res, nil
}

// cancelBody ends the request's context when the body is closed, and
// reports why a read failed when the transport cut it.
type cancelBody struct {
	io.ReadCloser
	cancel func()
	cause  func() error // nil: nothing cuts reads
}

func (b *cancelBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && b.cause != nil {
		if c := b.cause(); c != nil && !errors.Is(c, context.Canceled) {
			return n, c
		}
	}
	return n, err
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

var _ http.RoundTripper = (*Transport)(nil)
