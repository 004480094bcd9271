package mcpclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentichost/agentic/host"
)

// The failures of a call, which the model reads.
var (
	// ErrUnreachable: the server could not be reached, or dropped the
	// connection; the call may not have run.
	ErrUnreachable = errors.New("mcpclient: the MCP server is unreachable")
	// ErrTimeout: the call's deadline passed before the server answered.
	ErrTimeout = errors.New("mcpclient: the MCP tool call timed out")
	// ErrProtocol: the server answered with a JSON-RPC error (an unknown
	// tool, invalid arguments) or with something that is not a result.
	ErrProtocol = errors.New("mcpclient: the MCP server answered with an error")
	// ErrToolError: the tool ran and reported an error (isError).
	ErrToolError = errors.New("mcpclient: the MCP tool failed")
	// ErrInvalidServer: a Server's configuration is not usable.
	ErrInvalidServer = errors.New("mcpclient: invalid server")
	// ErrNotHeld: Approve named a tool definition that is not held.
	ErrNotHeld = errors.New("mcpclient: no such tool definition is held")
	// ErrTooLarge: an answer of the server (a JSON body, an SSE event, a
	// line of a local server's output) was larger than
	// Server.MaxMessageBytes. It was refused while it was read, and the
	// connection is made again. A *LimitError says more.
	ErrTooLarge = errors.New("mcpclient: the MCP server's answer is too large")
	// ErrTooManyTools: the server listed more tools than Server.MaxTools;
	// none of them serves. A *LimitError says more.
	ErrTooManyTools = errors.New("mcpclient: the MCP server lists too many tools")
)

// DefaultMaxOutputBytes is Server.MaxOutputBytes's default.
const DefaultMaxOutputBytes = 64 << 10

// Server says where an MCP server is and how its tools join an agent's.
type Server struct {
	// Name names the server; its tools are Prefix + their names to the
	// model. 1 to 32 of [A-Za-z0-9_-]. Required.
	Name string
	// URL is the server's streamable HTTP endpoint. Exactly one of URL
	// and Command is set.
	URL string
	// Command starts a local server that speaks over its stdin and
	// stdout: the program and its arguments.
	Command []string
	// Env is given to the command ("KEY=VALUE"), beside the few
	// variables of the host's environment every program needs (HOME,
	// LOGNAME, PATH, SHELL, TERM, USER; on Windows their like), which it
	// overrides: the command sees no other of the host's variables — not
	// a provider's key, not another server's token — in its environment
	// (a process of the host's user may still read the host's, as
	// /proc/PID/environ: run a command you do not trust as another
	// user). Default: nil, those few only.
	Env []string
	// Stderr receives the command's standard error. Default: nil,
	// discarded.
	Stderr io.Writer
	// HTTPClient makes the requests to URL: the caller's egress rules and
	// credentials live in it (see plugins.EgressClient, BearerClient).
	// Default: nil, http.DefaultClient.
	HTTPClient *http.Client
	// Prefix comes before each tool's name: 1 to 63 of [A-Za-z0-9_-].
	// Default: "", which means Name + "__". A tool whose name is empty,
	// or whose full name is not 1 to 64 of [A-Za-z0-9_-], is refused
	// (Status.Refused). Servers whose tools would share an agent see
	// [Collisions].
	Prefix string
	// Tools overrides what the annotations say, by the server's name of
	// the tool. Default: nil.
	Tools map[string]ToolOverride
	// TrustAnnotations takes each tool's effect and idempotence from its
	// annotations (readOnlyHint, destructiveHint, openWorldHint,
	// idempotentHint). They are the server's claims, which the
	// specification tells clients not to trust from a server they do not
	// trust: a destructive tool may claim readOnlyHint. Default: false:
	// every tool is external (it waits for approval where external tools
	// do) and not idempotent, unless Tools says otherwise.
	TrustAnnotations bool
	// Timeout bounds a call of any of its tools. Default: 0, the host's
	// tool timeout (host.Options.ToolTimeout).
	Timeout time.Duration
	// MaxOutputBytes caps a call's output; the rest is cut with a note.
	// Default: 0, which means DefaultMaxOutputBytes.
	MaxOutputBytes int
	// MaxMessageBytes bounds one message of the server, as it is read: a
	// JSON answer's body, one event of an SSE stream, one line of a local
	// server's output. A larger one is refused before more than the bound
	// is read — the call, or the listing, fails with a *LimitError
	// (ErrTooLarge) — and the connection is made again. Default: 0, which
	// means DefaultMaxMessageBytes.
	MaxMessageBytes int
	// MaxTools bounds the tools the server lists: a listing of more is
	// refused whole — none of its tools serves, the connection fails with
	// a *LimitError (ErrTooManyTools) that Status shows, and is tried
	// again — before more than one tool past the bound is read. Default:
	// 0, which means DefaultMaxTools.
	MaxTools int
	// MaxDefinitionBytes bounds a tool's definition (its name,
	// description, input schema and annotations, as JSON): a larger one
	// is refused — not served, not trusted, named in Status.Refused — and
	// the others serve. Default: 0, which means DefaultMaxDefinitionBytes.
	MaxDefinitionBytes int
	// Pins are the trusted definitions, by the server's tool name: the
	// digests ([Definition.Digest]) a Source saw and a person approved
	// before, as [Source.Pins] and Change.Pins give them. An empty set is
	// a first use recorded (of a server that listed no tools): every tool
	// listed is new, and held. Default: nil, no first use recorded: the
	// first listing is trusted.
	Pins map[string]string
	// TrustChanges serves a tool whose definition changed, and a new
	// tool, without approval: the rug-pull guard off. Default: false.
	TrustChanges bool
	// OnChange is told what happens to the server's tools: held
	// definitions, approvals, connections lost and made. It is called
	// without locks held, in order. Default: nil.
	OnChange func(Change)
	// Logger logs the same. Default: nil, slog.Default().
	Logger *slog.Logger

	// now and after are the clock of the waits before a connection is
	// made again and before a listing: time.Now and time.After but in
	// tests.
	now   func() time.Time
	after func(time.Duration) <-chan time.Time
}

// ToolOverride sets a tool's effect, idempotence or timeout whatever its
// annotations say.
type ToolOverride struct {
	// Effect is the tool's effect. Default: "", from the annotations.
	Effect host.Effect
	// Idempotent, when set, overrides idempotentHint.
	Idempotent *bool
	// Timeout bounds one call. Default: 0, Server.Timeout.
	Timeout time.Duration
}

// Definition is a tool as the server defines it: what the guard compares.
type Definition struct {
	// Name is the server's name of the tool.
	Name string `json:"name"`
	// Description and InputSchema are the server's.
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	// Annotations are the tool's hints.
	Annotations *mcp.ToolAnnotations `json:"annotations,omitempty"`
}

// Digest is "sha256:HEX" of the definition's JSON (its schema's members
// sorted).
func (d Definition) Digest() string {
	b, _ := json.Marshal(d)
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// HeldTool is a tool definition withheld from the agent until a person
// approves it.
type HeldTool struct {
	// Server is the server's name; Name the server's name of the tool.
	Server string `json:"server"`
	Name   string `json:"name"`
	// Old is the definition trusted before, nil for a new tool; New the
	// one held, and Digest its digest.
	Old    *Definition `json:"old,omitempty"`
	New    Definition  `json:"new"`
	Digest string      `json:"digest"`
	// Since is when it was held.
	Since time.Time `json:"since"`
}

// ChangeKind says what happened to a server's tools.
type ChangeKind string

// The changes.
const (
	// Connected: the Source reached the server and listed its tools.
	Connected ChangeKind = "connected"
	// Disconnected: the connection failed or dropped (Change.Err).
	Disconnected ChangeKind = "disconnected"
	// Held: a tool definition waits for approval (Change.Held).
	Held ChangeKind = "held"
	// Approved: a person approved a held definition; it serves.
	Approved ChangeKind = "approved"
	// Listed: the server's tools were listed again (a connection, a
	// list_changed notification): the tools served may have changed.
	Listed ChangeKind = "listed"
	// Flapping: a tool's definitions keep changing (Change.Tool, and
	// Change.Held its definition held now), or the server keeps offering
	// new or changed tools (Change.Tool ""): the definitions held next are
	// held without a change of their own until a person approves one.
	Flapping ChangeKind = "flapping"
)

// Change is a change of a Source.
type Change struct {
	Kind   ChangeKind
	Server string
	// Tool is the server's name of the tool concerned, if one is.
	Tool string
	// Held is the definition held (Held, Approved; Flapping of a tool).
	Held *HeldTool
	// Err is why the connection failed (Disconnected).
	Err error
	// Pins are the trusted digests after the change (Connected,
	// Approved): what a caller persists and gives back as Server.Pins.
	Pins map[string]string
}

// Status is a Source's state.
type Status struct {
	Server    string `json:"server"`
	Connected bool   `json:"connected"`
	// LastError is why the last connection failed, "" when none did.
	LastError string `json:"last_error,omitempty"`
	// Tools counts the tools it serves, Held those withheld.
	Tools int `json:"tools"`
	Held  int `json:"held"`
	// Refused are the tools of the last listing that are not served, and
	// why: a name that is not usable, a definition too large.
	Refused []RefusedTool `json:"refused,omitempty"`
}

// RefusedTool is a tool a server listed that is not served, whatever a
// person approves, until the server lists it otherwise.
type RefusedTool struct {
	// Name is the server's name of the tool: its first 64 bytes, and how
	// many there are, when it is longer.
	Name string `json:"name"`
	// Reason says why.
	Reason string `json:"reason"`
}

var (
	serverName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	prefixRule = regexp.MustCompile(`^[A-Za-z0-9_-]{1,63}$`)
)

// Collisions reports the servers whose tools could take one name if one
// agent took them all (ErrInvalidServer, every pair named): two servers
// of one prefix, or a prefix that begins another — server "a" (prefix
// "a__") and server "a__b" (prefix "a__b__") would both offer a__b__c, the
// first as its tool "b__c", the second as its "c", and the first one's
// would win unseen. Prefixes none of which begins another can never make
// one name. Nil when none collide.
func Collisions(servers ...Server) error {
	prefix := func(s Server) string {
		if s.Prefix == "" {
			return s.Name + "__"
		}
		return s.Prefix
	}
	var errs []error
	for i, a := range servers {
		for _, b := range servers[i+1:] {
			pa, pb := prefix(a), prefix(b)
			if strings.HasPrefix(pa, pb) || strings.HasPrefix(pb, pa) {
				errs = append(errs, fmt.Errorf("%w: %s (%s) and %s (%s): the tools of one could take the names of the other's: give one another name or prefix",
					ErrInvalidServer, a.Name, pa, b.Name, pb))
			}
		}
	}
	return errors.Join(errs...)
}

// Validate reports every problem of s's configuration (ErrInvalidServer),
// as Open would, without connecting.
func (s Server) Validate() error {
	_, err := s.normalize()
	return err
}

// normalize checks s and applies the defaults.
func (s Server) normalize() (Server, error) {
	var errs []error
	if !serverName.MatchString(s.Name) {
		errs = append(errs, fmt.Errorf("%w: name %q: want 1 to 32 of [A-Za-z0-9_-]", ErrInvalidServer, s.Name))
	}
	switch {
	case s.URL == "" && len(s.Command) == 0:
		errs = append(errs, fmt.Errorf("%w %s: neither a URL nor a command", ErrInvalidServer, s.Name))
	case s.URL != "" && len(s.Command) > 0:
		errs = append(errs, fmt.Errorf("%w %s: both a URL and a command", ErrInvalidServer, s.Name))
	case s.URL != "":
		u, err := url.Parse(s.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			errs = append(errs, fmt.Errorf("%w %s: URL %q: want an http or https URL", ErrInvalidServer, s.Name, redact(s.URL)))
		} else if u.User != nil {
			errs = append(errs, fmt.Errorf("%w %s: credentials in the URL: give them to the HTTP client", ErrInvalidServer, s.Name))
		}
	}
	if s.Prefix == "" {
		s.Prefix = s.Name + "__"
	} else if !prefixRule.MatchString(s.Prefix) {
		errs = append(errs, fmt.Errorf("%w %s: prefix %q: want 1 to 63 of [A-Za-z0-9_-]", ErrInvalidServer, s.Name, s.Prefix))
	}
	if s.MaxOutputBytes == 0 {
		s.MaxOutputBytes = DefaultMaxOutputBytes
	}
	if s.MaxMessageBytes == 0 {
		s.MaxMessageBytes = DefaultMaxMessageBytes
	}
	if s.MaxTools == 0 {
		s.MaxTools = DefaultMaxTools
	}
	if s.MaxDefinitionBytes == 0 {
		s.MaxDefinitionBytes = DefaultMaxDefinitionBytes
	}
	if s.MaxOutputBytes < 0 || s.Timeout < 0 || s.MaxMessageBytes < 0 || s.MaxTools < 0 || s.MaxDefinitionBytes < 0 {
		errs = append(errs, fmt.Errorf("%w %s: a negative output cap, bound or timeout", ErrInvalidServer, s.Name))
	}
	for name, o := range s.Tools {
		switch o.Effect {
		case "", host.EffectRead, host.EffectWrite, host.EffectExternal:
		default:
			errs = append(errs, fmt.Errorf("%w %s: tool %s: effect %q: want read, write or external", ErrInvalidServer, s.Name, name, o.Effect))
		}
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	if s.now == nil {
		s.now, s.after = time.Now, time.After
	}
	if s.HTTPClient == nil {
		s.HTTPClient = http.DefaultClient
	}
	s.Pins = maps.Clone(s.Pins)
	s.Tools = maps.Clone(s.Tools)
	return s, errors.Join(errs...)
}

// redact is a URL without its query and credentials, for errors and logs.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// Source is an MCP server's tools, as a host.Toolset. It keeps one
// connection to the server, made again when it drops.
type Source struct {
	cfg    Server
	client *mcp.Client
	tools  atomic.Pointer[[]host.Tool]

	ctx    context.Context // ends at Close
	cancel context.CancelFunc
	wg     sync.WaitGroup // keep, which emits changes
	// stopNotify tells the notifier, once keep has ended, to tell what is
	// queued and end; notified is closed when it has.
	stopNotify, notified chan struct{}

	mu       sync.Mutex
	session  *conn         // nil while disconnected
	dialing  chan struct{} // closed when the connection under way is made or failed
	lastErr  error
	defs     map[string]Definition // by the server's name: the last listing
	refused  []RefusedTool         // of the last listing, by name
	pins     map[string]string     // by the server's name: the digest trusted
	held     map[string]HeldTool
	closed   bool
	relist   chan struct{} // a list_changed notification asks for a listing
	changes  chan Change   // OnChange's queue
	listedAt time.Time
	firstUse bool // no pins were given: the first listing is trusted

	// What was told of held definitions since the last approval (see
	// tellLocked).
	told     map[string]*toldHeld // by tool
	toldN    int                  // Held changes told
	toldMute bool                 // the server flaps: none is told
}

// toldHeld is what a Source told of a tool's held definitions since the
// tool was last approved.
type toldHeld struct {
	digests []string // told Held
	mute    bool     // told Flapping: no more
}

// heldTellsPerTool bounds the Held changes told of one tool between
// approvals: then one Flapping, then none.
const heldTellsPerTool = 3

// Open makes a Source of s and connects to it, within ctx. A server that
// cannot be reached is no error: the Source tries again in the background
// and serves no tools meanwhile (see [Source.Status]); a configuration
// that is not usable is one (ErrInvalidServer).
func Open(ctx context.Context, s Server) (*Source, error) {
	s, err := s.normalize()
	if err != nil {
		return nil, err
	}
	src := &Source{cfg: s, defs: map[string]Definition{}, pins: s.Pins, held: map[string]HeldTool{},
		relist: make(chan struct{}, 1), changes: make(chan Change, 64), firstUse: s.Pins == nil,
		told: map[string]*toldHeld{}}
	if src.pins == nil {
		src.pins = map[string]string{}
	}
	src.tools.Store(&[]host.Tool{})
	src.client = mcp.NewClient(&mcp.Implementation{Name: "agentic-host", Version: "1"}, &mcp.ClientOptions{
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			select {
			case src.relist <- struct{}{}:
			default:
			}
		},
	})
	src.ctx, src.cancel = context.WithCancel(context.Background())
	src.stopNotify, src.notified = make(chan struct{}), make(chan struct{})
	src.wg.Add(1)
	go src.notifier()
	go src.keep()
	_, _ = src.connected(ctx) // a failure is retried in the background
	return src, nil
}

// Name is the server's name.
func (s *Source) Name() string { return s.cfg.Name }

// Tools returns the tools the server offers that serve: not held.
func (s *Source) Tools() []host.Tool { return *s.tools.Load() }

// Status says whether the Source is connected and what it serves.
func (s *Source) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Server: s.cfg.Name, Connected: s.session != nil, Tools: len(*s.tools.Load()), Held: len(s.held), Refused: slices.Clone(s.refused)}
	if s.lastErr != nil && s.session == nil {
		st.LastError = s.lastErr.Error()
	}
	return st
}

// Held returns the tool definitions withheld until a person approves
// them, by name.
func (s *Source) Held() []HeldTool {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Collect(maps.Values(s.held))
	slices.SortFunc(out, func(a, b HeldTool) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Pins returns the trusted digests, by the server's tool name.
func (s *Source) Pins() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.pins)
}

// Approve trusts the held definition of tool whose digest is digest: the
// tool serves from the next pass on.
func (s *Source) Approve(tool, digest string) error {
	s.mu.Lock()
	h, ok := s.held[tool]
	if !ok || h.Digest != digest {
		s.mu.Unlock()
		return fmt.Errorf("%w: server %s, tool %s, %s", ErrNotHeld, s.cfg.Name, tool, digest)
	}
	delete(s.held, tool)
	s.pins[tool] = digest
	// A person looked: what changes next is told again.
	s.toldN, s.toldMute = 0, false
	for name := range s.told {
		if _, listed := s.defs[name]; name == tool || !listed {
			delete(s.told, name)
		}
	}
	s.publishLocked()
	pins := maps.Clone(s.pins)
	s.mu.Unlock()
	s.emit(Change{Kind: Approved, Server: s.cfg.Name, Tool: tool, Held: &h, Pins: pins})
	return nil
}

// Close ends the connection and the Source's goroutines; a local server's
// process is stopped. The changes made before are told to OnChange before
// it returns.
func (s *Source) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	sess := s.session
	s.session = nil
	s.mu.Unlock()
	s.cancel()
	var err error
	if sess != nil {
		err = sess.Close()
	}
	// keep may be between making a connection and telling of it: the
	// notifier drains the queue only once keep has ended, so that the
	// change it tells last (a first use's pins) is told before Close
	// returns.
	s.wg.Wait()
	close(s.stopNotify)
	<-s.notified
	return err
}

// emit queues a change for OnChange and logs it.
func (s *Source) emit(c Change) {
	switch c.Kind {
	case Held:
		s.cfg.Logger.Warn("an MCP tool's definition changed, or the tool is new: it is held until a person approves it", "server", c.Server, "tool", c.Tool, "digest", c.Held.Digest)
	case Flapping:
		if c.Tool != "" {
			s.cfg.Logger.Warn("an MCP tool's definition keeps changing: the definitions held next are not logged until a person approves one", "server", c.Server, "tool", c.Tool, "digest", c.Held.Digest)
		} else {
			s.cfg.Logger.Warn("an MCP server keeps offering new or changed tools: the definitions held next are not logged until a person approves one", "server", c.Server)
		}
	case Disconnected:
		s.cfg.Logger.Warn("MCP server unreachable; retrying", "server", c.Server, "err", c.Err)
	case Listed:
		s.cfg.Logger.Debug("MCP server listed its tools", "server", c.Server)
	default:
		s.cfg.Logger.Info("MCP server "+string(c.Kind), "server", c.Server, "tool", c.Tool)
	}
	if s.cfg.OnChange == nil {
		return
	}
	select {
	case s.changes <- c: // queued, even while the Source closes
	default:
		select {
		case s.changes <- c:
		case <-s.ctx.Done():
		}
	}
}

// notifier calls OnChange in order, without locks held. At Close it tells
// what is queued still before it returns: the pins of a first use, or of
// an approval, are told before Close returns.
func (s *Source) notifier() {
	defer close(s.notified)
	for {
		select {
		case c := <-s.changes:
			s.cfg.OnChange(c)
		case <-s.stopNotify:
			for {
				select {
				case c := <-s.changes:
					s.cfg.OnChange(c)
				default:
					return
				}
			}
		}
	}
}

// The bounds of the wait before a connection is made again, and the pace
// of the listings notifications ask for: relistBurst at once, then one
// each relistPace, relistBurst at once again after relistQuiet without.
const (
	minBackoff  = 250 * time.Millisecond
	maxBackoff  = 30 * time.Second
	relistBurst = 64
	relistPace  = time.Second
	relistQuiet = time.Minute
)

// keep reconnects after a connection drops and lists the tools again when
// the server says they changed. It waits before each connection after a
// failure or a drop, twice as long each time up to maxBackoff, and as
// little as minBackoff again only after a connection that lasted
// maxBackoff: a server that drops every connection as soon as it is made
// cannot make the Source reconnect (and tell of it, and keep its pins)
// as fast as it can. Listings asked for by notifications are paced
// likewise (relistBurst, relistPace): a server notifying without end
// cannot make it list, parse and log as fast as it can notify.
func (s *Source) keep() {
	defer s.wg.Done()
	backoff := minBackoff
	wait := func() bool {
		select {
		case <-s.cfg.after(backoff):
			backoff = min(2*backoff, maxBackoff)
			return true
		case <-s.ctx.Done():
			return false
		}
	}
	var watched *conn // the session done watches
	var done chan struct{}
	var since time.Time // when watched was made
	relists := relistBurst
	var takenAt time.Time // when the last notification acted on was taken
	for {
		s.mu.Lock()
		sess := s.session
		s.mu.Unlock()
		if sess == nil {
			ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
			_, err := s.connected(ctx)
			cancel()
			if err != nil && !wait() {
				return
			}
			continue
		}
		if sess != watched {
			watched, done, since = sess, make(chan struct{}), sess.since
			go func(sess *conn, done chan struct{}) { sess.Wait(); close(done) }(sess, done)
		}
		select {
		case <-done:
			s.drop(sess, fmt.Errorf("%w: the connection ended", ErrUnreachable))
			if s.cfg.now().Sub(since) >= maxBackoff {
				backoff = minBackoff // it lasted: this is no flapping
			}
			if !wait() {
				return
			}
		case <-s.relist:
			// The quiet is measured between the notifications taken, not
			// from the end of a paced listing: a listing that waited out
			// its pace does not push the burst's return later.
			taken := s.cfg.now()
			if taken.Sub(takenAt) >= relistQuiet {
				relists = relistBurst
			}
			if relists > 0 {
				relists--
			} else {
				select {
				case <-s.cfg.after(relistPace):
				case <-done:
					continue // the connection made again lists afresh
				case <-s.ctx.Done():
					return
				}
			}
			ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
			if err := s.list(ctx, sess); err != nil {
				s.drop(sess, err)
			}
			cancel()
			takenAt = taken
		case <-s.ctx.Done():
			return
		}
	}
}

// connected returns the session, connecting (and listing the tools)
// when there is none; a caller that finds a connection under way waits
// for it, within ctx.
func (s *Source) connected(ctx context.Context) (*conn, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: the source is closed", ErrUnreachable)
	}
	if s.session != nil {
		sess := s.session
		s.mu.Unlock()
		return sess, nil
	}
	if wait := s.dialing; wait != nil {
		s.mu.Unlock()
		select {
		case <-wait:
			s.mu.Lock()
			sess, err := s.session, s.lastErr
			s.mu.Unlock()
			if sess != nil {
				return sess, nil
			}
			return nil, err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %v", ErrUnreachable, ctx.Err())
		}
	}
	s.dialing = make(chan struct{})
	s.mu.Unlock()
	sess, err := s.dial(ctx)
	if err == nil {
		if err = s.list(ctx, sess); err != nil {
			sess.Close()
		}
	}
	s.mu.Lock()
	close(s.dialing)
	s.dialing = nil
	if err != nil {
		first := s.lastErr == nil || s.lastErr.Error() != err.Error()
		s.lastErr = err
		s.mu.Unlock()
		if first {
			s.emit(Change{Kind: Disconnected, Server: s.cfg.Name, Err: err})
		}
		return nil, err
	}
	if s.closed {
		s.mu.Unlock()
		sess.Close()
		return nil, fmt.Errorf("%w: the source is closed", ErrUnreachable)
	}
	sess.since = s.cfg.now() // before it is told of, which a clock may follow
	s.session, s.lastErr = sess, nil
	pins := maps.Clone(s.pins)
	s.mu.Unlock()
	s.emit(Change{Kind: Connected, Server: s.cfg.Name, Pins: pins})
	return sess, nil
}

// conn is a session with the server and what refused its messages.
type conn struct {
	*mcp.ClientSession
	over  *overflow
	since time.Time // when it was made (listed): how long it lasted counts from here
}

// dial opens a session with the server, its messages bounded.
func (s *Source) dial(ctx context.Context) (*conn, error) {
	over := &overflow{server: s.cfg.Name, max: s.cfg.MaxMessageBytes}
	var t mcp.Transport
	if s.cfg.URL != "" {
		hc := *s.cfg.HTTPClient
		next := hc.Transport
		if next == nil {
			next = http.DefaultTransport
		}
		hc.Transport = &boundedTransport{next: next, o: over}
		t = &mcp.StreamableClientTransport{Endpoint: s.cfg.URL, HTTPClient: &hc, MaxRetries: -1, MaxEventSize: s.cfg.MaxMessageBytes}
	} else {
		p, err := startCommand(s.cfg.Command, s.cfg.Env, s.cfg.Stderr)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %v", ErrUnreachable, s.where(), err)
		}
		t = &mcp.IOTransport{Reader: io.NopCloser(&lineBound{r: p.stdout, o: over}), Writer: p, MaxLineLength: -1}
	}
	sess, err := s.client.Connect(ctx, t, nil)
	if err != nil {
		if le := over.get(); le != nil {
			return nil, le
		}
		return nil, fmt.Errorf("%w: %s: %s", ErrUnreachable, s.where(), scrub(err, s.cfg.URL))
	}
	return &conn{ClientSession: sess, over: over}, nil
}

// where names the server for errors.
func (s *Source) where() string {
	if s.cfg.URL != "" {
		return redact(s.cfg.URL)
	}
	return "command " + s.cfg.Command[0]
}

// scrub is err's text without the server's URL's query, which may hold
// credentials.
func scrub(err error, rawURL string) string {
	msg := err.Error()
	if rawURL != "" {
		msg = strings.ReplaceAll(msg, rawURL, redact(rawURL))
	}
	return msg
}

// drop forgets sess after it failed.
func (s *Source) drop(sess *conn, err error) {
	s.mu.Lock()
	if s.session != sess {
		s.mu.Unlock()
		return
	}
	s.session, s.lastErr = nil, err
	closed := s.closed
	s.mu.Unlock()
	sess.Close()
	if !closed {
		s.emit(Change{Kind: Disconnected, Server: s.cfg.Name, Err: err})
	}
}

// list reads the server's tools and applies the guard.
func (s *Source) list(ctx context.Context, sess *conn) error {
	var defs []Definition
	var refused []RefusedTool
	var cursor string
	listed := 0
	seen, twice := map[string]bool{}, map[string]bool{}
	for page := 0; ; page++ {
		if page == 100 {
			return fmt.Errorf("%w: tools/list: more than 100 pages", ErrProtocol)
		}
		res, err := sess.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return s.classify(ctx, sess, "tools/list", err)
		}
		for _, t := range res.Tools {
			if t == nil {
				continue
			}
			if listed++; listed > s.cfg.MaxTools {
				return &LimitError{Server: s.cfg.Name, What: "a listing", Field: "MaxTools", Max: s.cfg.MaxTools}
			}
			d := Definition{Name: t.Name, Description: t.Description, Annotations: t.Annotations}
			if t.InputSchema != nil {
				b, err := json.Marshal(t.InputSchema)
				if err != nil {
					return fmt.Errorf("%w: tool %s: its input schema: %v", ErrProtocol, t.Name, err)
				}
				d.InputSchema = b
			}
			if why := s.refuse(d); why != "" {
				refused = append(refused, RefusedTool{Name: clipName(d.Name), Reason: why})
				continue
			}
			if seen[d.Name] {
				twice[d.Name] = true
				continue
			}
			seen[d.Name] = true
			defs = append(defs, d)
		}
		if cursor = res.NextCursor; cursor == "" {
			break
		}
	}
	if len(twice) > 0 {
		// Neither definition serves: the model would get one of them,
		// the guard have compared the other.
		defs = slices.DeleteFunc(defs, func(d Definition) bool { return twice[d.Name] })
		for name := range twice {
			refused = append(refused, RefusedTool{Name: name, Reason: "the server lists it twice"})
		}
	}
	s.apply(defs, refused)
	return nil
}

// clipName is a tool's name as Status.Refused shows it: its first 64
// bytes, and how many more there are.
func clipName(name string) string {
	if len(name) <= 64 {
		return name
	}
	return fmt.Sprintf("%s… (%d bytes)", strings.ToValidUTF8(name[:64], ""), len(name))
}

// refuse says why d is not served, "" when it may be.
func (s *Source) refuse(d Definition) string {
	full := s.cfg.Prefix + d.Name
	switch {
	case d.Name == "":
		return "its name is empty"
	case !toolChars.MatchString(d.Name):
		return "its name is not of [A-Za-z0-9_-] only, as the models' providers want"
	case len(full) > 64:
		return fmt.Sprintf("its name as the model would see it is %d characters, longer than 64, as the models' providers want", len(full))
	}
	b, _ := json.Marshal(d)
	if len(b) > s.cfg.MaxDefinitionBytes {
		return fmt.Sprintf("its definition is %d bytes, more than %d (the bound, MaxDefinitionBytes)", len(b), s.cfg.MaxDefinitionBytes)
	}
	return ""
}

// apply takes a listing: trusted definitions serve, changed and new ones
// are held (unless TrustChanges), and the first listing of a Source
// given no pins (nil: not even an empty set) is trusted whole.
func (s *Source) apply(defs []Definition, refused []RefusedTool) {
	var tell []Change
	slices.SortFunc(refused, func(a, b RefusedTool) int { return strings.Compare(a.Name, b.Name) })
	s.mu.Lock()
	if !slices.Equal(refused, s.refused) {
		for _, r := range refused {
			s.cfg.Logger.Warn("an MCP tool is refused", "server", s.cfg.Name, "tool", r.Name, "reason", r.Reason)
		}
	}
	s.refused = refused
	trustAll := s.listedAt.IsZero() && s.firstUse || s.cfg.TrustChanges
	s.listedAt = time.Now()
	next := map[string]Definition{}
	for _, d := range defs {
		next[d.Name] = d
		digest := d.Digest()
		switch pin, pinned := s.pins[d.Name]; {
		case pin == digest:
			delete(s.held, d.Name)
		case trustAll:
			s.pins[d.Name] = digest
			delete(s.held, d.Name)
		default:
			if h, ok := s.held[d.Name]; ok && h.Digest == digest {
				continue // held already
			}
			h := HeldTool{Server: s.cfg.Name, Name: d.Name, New: d, Digest: digest, Since: time.Now().UTC()}
			if old, ok := s.defs[d.Name]; ok && pinned && old.Digest() == pin {
				h.Old = &old
			} else if pinned {
				h.Old = &Definition{Name: d.Name, Description: "(a definition of digest " + pin + ")"}
			}
			s.held[d.Name] = h
			switch s.tellLocked(d.Name, digest) {
			case Held:
				tell = append(tell, Change{Kind: Held, Server: s.cfg.Name, Tool: h.Name, Held: &h})
			case Flapping:
				tell = append(tell, Change{Kind: Flapping, Server: s.cfg.Name, Tool: h.Name, Held: &h})
			case flappingServer:
				tell = append(tell, Change{Kind: Flapping, Server: s.cfg.Name})
			}
		}
	}
	for name := range s.held {
		if _, ok := next[name]; !ok {
			delete(s.held, name) // the server no longer offers it
		}
	}
	s.defs = next
	s.publishLocked()
	s.mu.Unlock()
	for _, c := range tell {
		s.emit(c)
	}
	s.emit(Change{Kind: Listed, Server: s.cfg.Name})
}

// flappingServer is tellLocked's answer for a Flapping change of the
// server rather than of one tool.
const flappingServer ChangeKind = "flapping server"

// tellLocked decides whether a definition just held is told (Held), and
// coalesces the telling of a server whose definitions flap: a definition
// told already since the tool was last approved is not told again (a
// server flipping between two definitions is told of once); after
// heldTellsPerTool definitions of one tool, the next is told as Flapping
// and none after it; after Server.MaxTools Held changes of the server,
// the next is told as its Flapping and none after it — each until a
// person approves a definition. s.mu is held.
func (s *Source) tellLocked(tool, digest string) ChangeKind {
	t := s.told[tool]
	switch {
	case s.toldMute || t != nil && (t.mute || slices.Contains(t.digests, digest)):
		return ""
	case s.toldN >= s.cfg.MaxTools:
		s.toldMute = true
		return flappingServer
	case t == nil:
		t = &toldHeld{}
		s.told[tool] = t
	case len(t.digests) >= heldTellsPerTool:
		t.mute = true
		return Flapping
	}
	t.digests = append(t.digests, digest)
	s.toldN++
	return Held
}

var toolChars = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// publishLocked builds the tools that serve; s.mu is held.
func (s *Source) publishLocked() {
	names := slices.Sorted(maps.Keys(s.defs))
	tools := make([]host.Tool, 0, len(names))
	for _, name := range names {
		d := s.defs[name]
		if _, held := s.held[name]; held || s.pins[name] != d.Digest() {
			continue
		}
		tools = append(tools, s.tool(s.cfg.Prefix+name, d)) // its name checked by list
	}
	s.tools.Store(&tools)
}

// tool makes d a host.Tool named full.
func (s *Source) tool(full string, d Definition) *mcpTool {
	spec := host.ToolSpec{Name: full, Description: d.Description, InputSchema: d.InputSchema, Timeout: s.cfg.Timeout}
	if !isObjectSchema(d.InputSchema) {
		spec.InputSchema = json.RawMessage(`{"type":"object"}`)
	}
	spec.Effect, spec.Idempotent = host.EffectExternal, false // the annotations are claims
	if s.cfg.TrustAnnotations {
		spec.Effect, spec.Idempotent = effectOf(d.Annotations)
	}
	if o, ok := s.cfg.Tools[d.Name]; ok {
		if o.Effect != "" {
			spec.Effect = o.Effect
		}
		if o.Idempotent != nil {
			spec.Idempotent = *o.Idempotent
		}
		if o.Timeout > 0 {
			spec.Timeout = o.Timeout
		}
	}
	return &mcpTool{src: s, name: d.Name, spec: spec, source: "mcp:" + s.cfg.Name + "/" + d.Name + "@" + d.Digest()}
}

// effectOf reads a tool's effect from its annotations, as the
// specification defines their defaults (destructiveHint and openWorldHint
// true when absent).
func effectOf(a *mcp.ToolAnnotations) (host.Effect, bool) {
	if a == nil {
		return host.EffectExternal, false
	}
	switch {
	case a.ReadOnlyHint:
		return host.EffectRead, a.IdempotentHint
	case a.DestructiveHint == nil || *a.DestructiveHint, a.OpenWorldHint == nil || *a.OpenWorldHint:
		return host.EffectExternal, a.IdempotentHint
	default:
		return host.EffectWrite, a.IdempotentHint
	}
}

// isObjectSchema reports whether raw is a JSON Schema of an object.
func isObjectSchema(raw json.RawMessage) bool {
	var s struct {
		Type any `json:"type"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &s) != nil {
		return false
	}
	return s.Type == "object"
}

// classify turns an error of a request on c into one of the package's.
func (s *Source) classify(ctx context.Context, c *conn, what string, err error) error {
	var wire *jsonrpc.Error
	if le := c.over.get(); le != nil {
		return le // the connection failed on a message too large
	}
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%w: %s on %s", ErrTimeout, what, s.cfg.Name)
	case ctx.Err() != nil:
		return ctx.Err()
	case errors.As(err, &wire):
		return fmt.Errorf("%w: %s: %s", ErrProtocol, what, wire.Message)
	default:
		return fmt.Errorf("%w: %s: %s", ErrUnreachable, s.where(), scrub(err, s.cfg.URL))
	}
}

// mcpTool is one of a server's tools.
type mcpTool struct {
	src    *Source
	name   string // the server's
	spec   host.ToolSpec
	source string // "mcp:SERVER/TOOL@sha256:…"
}

func (t *mcpTool) Spec() host.ToolSpec { return t.spec }

// Call runs the tool on the server. The result names the server, the
// tool and its definition's digest (Source).
func (t *mcpTool) Call(ctx context.Context, call host.ToolCall) (host.ToolResult, error) {
	sess, err := t.src.connected(ctx)
	if err != nil {
		return host.ToolResult{Source: t.source}, err
	}
	args := json.RawMessage(call.Input)
	if len(args) == 0 {
		args = json.RawMessage(`{}`)
	}
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: t.name, Arguments: args})
	if err != nil {
		err = t.src.classify(ctx, sess, "tools/call "+t.name, err)
		if errors.Is(err, ErrUnreachable) || errors.Is(err, ErrTooLarge) {
			t.src.drop(sess, err)
		}
		return host.ToolResult{Source: t.source}, err
	}
	out := clip(outputOf(res), t.src.cfg.MaxOutputBytes)
	if res.IsError {
		if out == "" {
			out = "the tool reported an error without a message"
		}
		return host.ToolResult{Source: t.source}, fmt.Errorf("%w: %s", ErrToolError, out)
	}
	return host.ToolResult{Output: out, Source: t.source}, nil
}

// outputOf is what the model sees of a result: its text, a line for each
// item that is not text, or its structured content when it has nothing
// else.
func outputOf(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		switch c := c.(type) {
		case *mcp.TextContent:
			parts = append(parts, c.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[image %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[audio %s, %d bytes]", c.MIMEType, len(c.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[resource %s %s]", c.URI, c.Name))
		case *mcp.EmbeddedResource:
			if r := c.Resource; r != nil && r.Text != "" {
				parts = append(parts, r.Text)
			} else if r != nil {
				parts = append(parts, fmt.Sprintf("[resource %s, %d bytes]", r.URI, len(r.Blob)))
			}
		}
	}
	if len(parts) == 0 && res.StructuredContent != nil {
		if b, err := json.Marshal(res.StructuredContent); err == nil {
			return string(b)
		}
	}
	return strings.Join(parts, "\n")
}

// clip cuts s to at most n bytes (on a rune boundary), with a note.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[output cut: %d of %d bytes]", cut, len(s))
}

var (
	_ host.Toolset = (*Source)(nil)
	_ host.Tool    = (*mcpTool)(nil)
)
