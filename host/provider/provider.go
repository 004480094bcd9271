package provider

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
)

// DefaultBaseURL is the endpoint used when neither Config.BaseURL nor
// $OPENROUTER_BASE_URL is set: OpenRouter's OpenAI-compatible API.
const DefaultBaseURL = "https://openrouter.ai/api/v1"

// DefaultIdleTimeout bounds the silence of a response body when
// Config.IdleTimeout is 0. It is long because some providers send nothing
// while a reasoning model thinks; OpenRouter sends keep-alive comments.
const DefaultIdleTimeout = 10 * time.Minute

// Environment variables that supply defaults to [New].
const (
	EnvBaseURL = "OPENROUTER_BASE_URL"
	EnvAPIKey  = "OPENROUTER_API_KEY"
)

// UsageMode says whether requests carry OpenRouter's usage-accounting field
// `usage: {include: true}`.
type UsageMode int

// The usage modes.
const (
	// UsageAuto sends the field unless the base URL's host is
	// api.openai.com, which rejects unknown fields with 400.
	UsageAuto UsageMode = 0
	// UsageOn always sends the field.
	UsageOn UsageMode = 1
	// UsageOff never sends the field.
	UsageOff UsageMode = -1
)

// Config configures a [Client]. The zero value talks to OpenRouter with the
// key from $OPENROUTER_API_KEY.
type Config struct {
	// BaseURL is the OpenAI-compatible API root; requests go to
	// BaseURL/chat/completions and BaseURL/models. It must be an absolute
	// http or https URL. Default: $OPENROUTER_BASE_URL, else
	// [DefaultBaseURL].
	BaseURL string
	// APIKey is sent as a bearer token. It may stay empty: a local server
	// such as the fake model needs none, and then no Authorization header
	// is sent (ambient OPENAI_* variables are never read). Default:
	// $OPENROUTER_API_KEY.
	APIKey string
	// HTTPClient sends the requests. Its Timeout should be zero: streams
	// are long, and [Config.IdleTimeout] bounds a silent one. Default: a
	// client whose transport bounds dialling (30s), the TLS handshake
	// (10s) and the wait for response headers (HeaderTimeout), with no overall
	// timeout, keeping up to [DefaultMaxIdleConns] idle connections; each
	// Client gets its own, so build one Client and share it.
	HTTPClient *http.Client
	// UsageAccounting says whether requests carry OpenRouter's
	// `usage: {include: true}`; stream_options.include_usage is always
	// sent. Default: [UsageAuto].
	UsageAccounting UsageMode
	// Headers are extra request headers, e.g. OpenRouter's attribution
	// headers HTTP-Referer and X-Title. Default: none.
	Headers map[string]string
	// IdleTimeout bounds the silence between two reads of a response body
	// (keep-alive comments count as reads); a stream silent for longer
	// fails with [model.ErrStalled]. Default: 0, which means
	// [DefaultIdleTimeout]; -1 disables the bound.
	IdleTimeout time.Duration
	// HeaderTimeout bounds the wait for the response headers after the
	// request was sent; a hung connection fails as a transient network
	// error. It applies to the default HTTPClient only. Default: 0, which
	// means [DefaultHeaderTimeout]; -1 disables the bound.
	HeaderTimeout time.Duration
}

// DefaultHeaderTimeout bounds the wait for response headers when
// Config.HeaderTimeout is 0. Some providers send headers only with the
// first token, which a reasoning model may think long about.
const DefaultHeaderTimeout = 5 * time.Minute

// Client streams model passes. It is safe for concurrent use.
type Client struct {
	baseURL     string
	openAIHost  bool // the base URL's host is api.openai.com
	usage       bool // send usage:{include:true}
	idleTimeout time.Duration
	opts        []option.RequestOption
	chat        openai.ChatCompletionService
	api         openai.Client

	models models
}

// New normalises and validates cfg and returns a Client. All configuration
// problems are reported together.
func New(cfg Config) (*Client, error) {
	var errs []error
	if cfg.BaseURL == "" {
		cfg.BaseURL = os.Getenv(EnvBaseURL)
	}
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	if cfg.APIKey == "" {
		cfg.APIKey = os.Getenv(EnvAPIKey)
	}
	u, err := url.Parse(cfg.BaseURL)
	switch {
	case err != nil:
		errs = append(errs, fmt.Errorf("provider: Config.BaseURL %q: %v", cfg.BaseURL, err))
	case u.Scheme != "http" && u.Scheme != "https":
		errs = append(errs, fmt.Errorf("provider: Config.BaseURL %q: scheme must be http or https", cfg.BaseURL))
	case u.Host == "":
		errs = append(errs, fmt.Errorf("provider: Config.BaseURL %q has no host", cfg.BaseURL))
	case u.RawQuery != "" || u.Fragment != "":
		errs = append(errs, fmt.Errorf("provider: Config.BaseURL %q must not carry a query or fragment", cfg.BaseURL))
	}
	if strings.ContainsAny(cfg.APIKey, "\r\n\x00") {
		errs = append(errs, errors.New("provider: Config.APIKey contains a control character"))
	}
	switch cfg.UsageAccounting {
	case UsageAuto, UsageOn, UsageOff:
	default:
		errs = append(errs, fmt.Errorf("provider: Config.UsageAccounting %d is not UsageAuto, UsageOn or UsageOff", cfg.UsageAccounting))
	}
	names := make([]string, 0, len(cfg.Headers))
	for name := range cfg.Headers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if !validHeaderName(name) {
			errs = append(errs, fmt.Errorf("provider: Config.Headers: invalid header name %q", name))
		}
		if strings.ContainsAny(cfg.Headers[name], "\r\n\x00") {
			errs = append(errs, fmt.Errorf("provider: Config.Headers[%q]: value contains a control character", name))
		}
	}
	switch {
	case cfg.HeaderTimeout == 0:
		cfg.HeaderTimeout = DefaultHeaderTimeout
	case cfg.HeaderTimeout == -1:
		cfg.HeaderTimeout = 0
	case cfg.HeaderTimeout < 0:
		errs = append(errs, fmt.Errorf("provider: Config.HeaderTimeout %s is negative (use -1 to disable)", cfg.HeaderTimeout))
	}
	switch {
	case cfg.IdleTimeout == 0:
		cfg.IdleTimeout = DefaultIdleTimeout
	case cfg.IdleTimeout == -1:
		cfg.IdleTimeout = 0
	case cfg.IdleTimeout < 0:
		errs = append(errs, fmt.Errorf("provider: Config.IdleTimeout %s is negative (use -1 to disable)", cfg.IdleTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	if cfg.HTTPClient == nil {
		cfg.HTTPClient = defaultHTTPClient(cfg.HeaderTimeout)
	}
	c := &Client{
		baseURL:     strings.TrimSuffix(cfg.BaseURL, "/"),
		openAIHost:  strings.EqualFold(u.Hostname(), "api.openai.com"),
		idleTimeout: cfg.IdleTimeout,
	}
	switch cfg.UsageAccounting {
	case UsageOn:
		c.usage = true
	case UsageAuto:
		c.usage = !c.openAIHost
	}
	// The options are built from cfg alone: openai.NewClient would read
	// OPENAI_API_KEY, OPENAI_ORG_ID, OPENAI_CUSTOM_HEADERS … from the
	// environment and send them to whatever endpoint this is.
	c.opts = []option.RequestOption{
		option.WithBaseURL(c.baseURL + "/"),
		option.WithHTTPClient(cfg.HTTPClient),
		option.WithMaxRetries(0), // the host is the one retry owner
		option.WithAPIKey(cfg.APIKey),
	}
	for _, name := range names {
		c.opts = append(c.opts, option.WithHeader(name, cfg.Headers[name]))
	}
	c.chat = openai.NewChatCompletionService(c.opts...)
	c.api = openai.Client{Options: c.opts}
	c.models.lock = make(chan struct{}, 1)
	c.models.now = time.Now
	return c, nil
}

// BaseURL returns the API root the client talks to, without a trailing
// slash.
func (c *Client) BaseURL() string { return c.baseURL }

// defaultHTTPClient returns a client with transport-level timeouts and no
// overall timeout, which would cut long streams.
func defaultHTTPClient(headerTimeout time.Duration) *http.Client {
	var t *http.Transport
	if dt, ok := http.DefaultTransport.(*http.Transport); ok {
		t = dt.Clone()
	} else {
		t = &http.Transport{Proxy: http.ProxyFromEnvironment, ForceAttemptHTTP2: true, MaxIdleConns: 100}
	}
	t.DialContext = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ResponseHeaderTimeout = headerTimeout
	t.ExpectContinueTimeout = time.Second
	t.IdleConnTimeout = 90 * time.Second
	// A server streams many passes at once to one endpoint: keep their
	// connections (over HTTP/1.1, one a stream) for the next passes, where
	// the default two per host would have most of a burst dial again.
	t.MaxIdleConns = DefaultMaxIdleConns
	t.MaxIdleConnsPerHost = DefaultMaxIdleConns
	return &http.Client{Transport: t}
}

// DefaultMaxIdleConns is how many idle connections the default HTTPClient
// keeps, to the model endpoint and in all, each for up to 90 s. A server
// that streams a burst of passes at once over HTTP/1.1 opens a connection
// for each; keeping as many for the next burst spares it dialling again.
// An idle connection costs about 24 KiB (its buffers and two goroutines),
// so the pool holds 24 MiB at most.
const DefaultMaxIdleConns = 1024

// validHeaderName reports whether s is an HTTP token (RFC 9110).
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}
