// Package fakemodel is an in-process, OpenAI-compatible chat-completions
// server that speaks exactly the OpenRouter wire format captured in
// internal/fixtures. Tests and the offline demo point an OpenAI client
// (openai-go) at it instead of a real provider.
//
// It serves:
//
//   - POST {base}/chat/completions, streaming (text/event-stream, the chunk
//     shapes of stream_text.sse and stream_tool_calls.sse, a final usage chunk
//     with "choices":[], then "data: [DONE]") or not (a chat.completion body);
//   - GET {base}/models, a models list shaped like models_list.json.
//
// {base} may be empty, "/v1" or "/api/v1". [Server.URL] gives a base URL that
// can be handed to openai-go's option.WithBaseURL.
//
// What the server answers is decided per chat request, in this order: a
// random fault (Options.FaultRate), the next scripted [Reply]
// (Options.Script, [Server.Enqueue]; FIFO, one per request),
// Options.Respond, or else [DefaultReply], a small deterministic imitation of
// an agent model: it calls offered tools that the user names, summarises tool
// results and otherwise echoes the user.
//
// Every failure mode a client must survive can be injected with a [Fault]:
// HTTP errors with the real OpenRouter bodies, dropped connections, severed
// or stalled streams, mid-stream error chunks and streams that end without a
// finish reason. A scripted reply's fault applies to its first attempt only,
// so a retry receives the reply itself.
package fakemodel

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// DefaultModel is the model listed by /models when Options.Models is empty.
const DefaultModel = "fake/echo"

// DefaultContextLength is DefaultModel's context length.
const DefaultContextLength = 128000

// DefaultChunkSize is the number of words per streamed content chunk when
// Options.ChunkSize is zero.
const DefaultChunkSize = 3

// DefaultProvider is the "provider" field of every response when
// Options.Provider is empty.
const DefaultProvider = "FakeModel"

// Options configures a [Server]. The zero value is a working server.
type Options struct {
	// Addr is the TCP address [Start] listens on. Default "127.0.0.1:0" (a
	// free port on the loopback interface). Unused by [New].
	Addr string

	// Models maps each model id served by /models to its context length.
	// Default: {DefaultModel: DefaultContextLength}. Requests may name any
	// model (see StrictModels); when the requested model is listed here and
	// the estimated prompt tokens plus the request's max tokens exceed its
	// context length, the request is refused with OpenRouter's HTTP 400
	// context-overflow error (before any script or fault is consulted).
	Models map[string]int

	// StrictModels refuses (HTTP 400) chat requests for models not listed
	// in Models. Default false: any model name is accepted and echoed.
	// A request with OpenRouter's "models" parameter is routed as
	// OpenRouter routes it: to the first of its model and then its models
	// that is served (any, without StrictModels: the first named), which
	// the response names in its "model"; refused only when none is.
	StrictModels bool

	// Provider is the "provider" field of every chunk and body. Default
	// DefaultProvider.
	Provider string

	// ChunkSize is the number of words per streamed content or reasoning
	// chunk. Default DefaultChunkSize.
	ChunkSize int

	// Latency is the pause before each streamed data chunk after the first.
	// Default 0 (no pause).
	Latency time.Duration

	// NoKeepAliveComment suppresses the ": OPENROUTER PROCESSING" comment
	// that otherwise opens every stream. Default false (comment sent).
	NoKeepAliveComment bool

	// Script is the initial queue of replies, consumed one per chat request
	// in order. Default empty. See also [Server.Enqueue].
	Script []Reply

	// Respond computes the reply for a chat request when the script is
	// empty. Default nil, meaning [DefaultReply]. It is called without any
	// lock held and may be called concurrently.
	Respond func(Request) Reply

	// FaultRate is the probability, from 0 to 1, that a chat request gets a
	// random fault instead of its reply. Default 0 (never). Random faults
	// never consume a scripted reply.
	FaultRate float64

	// FaultKinds are the kinds random faults are drawn from, uniformly.
	// Default (when empty): DefaultFaultKinds().
	FaultKinds []FaultKind

	// Seed seeds the random fault generator: with the same seed and the same
	// order of requests the same requests fail the same way. Default 0 (a
	// valid seed, so the default is deterministic too).
	Seed int64
}

// Server is the fake model server. It is an [http.Handler] and is safe for
// concurrent use. Create it with [New] (then serve it yourself, for example
// with httptest) or [Start].
type Server struct {
	opts     Options
	models   map[string]int
	provider string

	mu       sync.Mutex
	queue    []Reply
	requests []Request
	rng      *rand.Rand

	closeOnce sync.Once
	done      chan struct{}
	httpSrv   *http.Server
	url       string
}

// New returns a server configured by opts. It does not listen: use it as an
// http.Handler, or call [Start] instead.
func New(opts Options) *Server {
	s := &Server{
		opts:     opts,
		models:   opts.Models,
		provider: opts.Provider,
		queue:    append([]Reply(nil), opts.Script...),
		rng:      rand.New(rand.NewPCG(uint64(opts.Seed), 0x6661_6b65_6d6f_646c)),
		done:     make(chan struct{}),
	}
	if len(s.models) == 0 {
		s.models = map[string]int{DefaultModel: DefaultContextLength}
	}
	if s.provider == "" {
		s.provider = DefaultProvider
	}
	if s.opts.ChunkSize <= 0 {
		s.opts.ChunkSize = DefaultChunkSize
	}
	if len(s.opts.FaultKinds) == 0 {
		s.opts.FaultKinds = DefaultFaultKinds()
	}
	return s
}

// Start creates a server with [New] and serves it on opts.Addr (default
// "127.0.0.1:0") in a goroutine until [Server.Close].
func Start(opts Options) (*Server, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	s := New(opts)
	s.httpSrv = &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	s.url = "http://" + ln.Addr().String() + "/v1"
	// Serve returns http.ErrServerClosed after Close; there is no one to
	// report another error to, and Close is the way out either way.
	go func() { _ = s.httpSrv.Serve(ln) }()
	return s, nil
}

// URL returns the base URL of a server made by [Start], such as
// "http://127.0.0.1:41234/v1", ready for openai-go's option.WithBaseURL.
// It is empty for a server made by [New].
func (s *Server) URL() string { return s.url }

// Close stops a server made by [Start], dropping open connections, and
// releases every stalled stream. It is safe to call more than once, and on a
// server made by [New] (where it only releases stalls).
func (s *Server) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.done)
		if s.httpSrv != nil {
			err = s.httpSrv.Close()
		}
	})
	return err
}

// Enqueue appends replies to the script. Each chat request consumes the
// next one (FIFO) before Options.Respond or the default behaviour is used.
func (s *Server) Enqueue(replies ...Reply) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue = append(s.queue, replies...)
}

// Pending returns how many scripted replies are still queued.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// Requests returns every well-formed chat request received so far, in
// arrival order, including the ones answered with a fault.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// RequestCount returns len(s.Requests()) without copying.
func (s *Server) RequestCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.requests)
}

// ServeHTTP routes POST …/chat/completions and GET …/models, where … is
// empty, "/v1" or "/api/v1". Anything else gets a JSON 404 or 405.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := strings.TrimSuffix(r.URL.Path, "/")
	for _, prefix := range []string{"/api/v1", "/v1"} {
		if rest, ok := strings.CutPrefix(path, prefix); ok {
			path = rest
			break
		}
	}
	switch path {
	case "/chat/completions":
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", http.MethodPost)
			writeJSONError(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		s.serveChat(w, r)
	case "/models":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", http.MethodGet)
			writeJSONError(w, http.StatusMethodNotAllowed, "method not allowed")
			return
		}
		s.serveModels(w)
	default:
		writeJSONError(w, http.StatusNotFound, "not found: "+r.URL.Path)
	}
}

// plan is what one chat request gets.
type plan struct {
	reply Reply
	fault *Fault
	// lazy is set when reply must still be computed (outside the lock).
	lazy bool
}

// next decides the answer to req: a random fault, the scripted head, or
// Respond/DefaultReply.
func (s *Server) next(req Request) plan {
	s.mu.Lock()
	var p plan
	if s.opts.FaultRate > 0 && s.rng.Float64() < s.opts.FaultRate {
		kind := s.opts.FaultKinds[s.rng.IntN(len(s.opts.FaultKinds))]
		p.fault = &Fault{Kind: kind}
		if kind.needsContent() {
			if len(s.queue) > 0 {
				p.reply = s.queue[0]
				p.reply.Fault = nil
			} else {
				p.lazy = true
			}
		}
	} else if len(s.queue) > 0 {
		p.reply = s.queue[0]
		if p.reply.Fault != nil {
			// The fault is spent on this attempt; the retry gets the reply.
			p.fault = p.reply.Fault
			s.queue[0].Fault = nil
		} else {
			s.queue = s.queue[1:]
		}
	} else {
		p.lazy = true
	}
	s.mu.Unlock()

	if p.lazy {
		if s.opts.Respond != nil {
			p.reply = s.opts.Respond(req)
		} else {
			p.reply = DefaultReply(req)
		}
		if p.fault == nil {
			p.fault = p.reply.Fault
		}
		p.reply.Fault = nil
	}
	return p
}

func (s *Server) serveChat(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return
	}
	req, err := parseRequest(body, r.Header)
	if err != nil {
		writeJSONError(w, http.StatusBadRequest, err.Error())
		return
	}
	s.mu.Lock()
	s.requests = append(s.requests, req)
	s.mu.Unlock()

	if len(req.Models) > 0 {
		req.Model = s.route(req)
	}
	window, known := s.models[req.Model]
	if s.opts.StrictModels && !known {
		writeJSONError(w, http.StatusBadRequest, req.Model+" is not a valid model ID")
		return
	}
	if prompt := estimatePromptTokens(req); known && window > 0 && prompt+req.MaxTokens > window {
		writeRaw(w, http.StatusBadRequest, overflowBody(window, prompt, req.MaxTokens))
		return
	}

	p := s.next(req)
	c := &call{srv: s, w: w, r: r, req: req, reply: p.reply, fault: p.fault}
	c.serve()
}

// route picks the model that answers a request with OpenRouter's "models"
// parameter: the first of its model and its models that the server serves
// (without StrictModels, the first named); the last named when none is,
// for its refusal.
func (s *Server) route(req Request) string {
	names := append([]string{req.Model}, req.Models...)
	if req.Model == "" {
		names = names[1:]
	}
	if !s.opts.StrictModels {
		return names[0]
	}
	for _, m := range names {
		if _, ok := s.models[m]; ok {
			return m
		}
	}
	return names[len(names)-1]
}

func (s *Server) serveModels(w http.ResponseWriter) {
	body, err := json.Marshal(modelsList(s.models))
	if err != nil {
		writeJSONError(w, http.StatusInternalServerError, err.Error())
		return
	}
	writeRaw(w, http.StatusOK, body)
}
