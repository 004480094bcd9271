package a2a

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ProtocolVersion is the revision of the A2A specification this package
// implements, as an agent card states it.
const ProtocolVersion = "0.3.0"

// The methods of the JSON-RPC binding.
const (
	MethodSend        = "message/send"
	MethodStream      = "message/stream"
	MethodGet         = "tasks/get"
	MethodCancel      = "tasks/cancel"
	MethodResubscribe = "tasks/resubscribe"
	// The push notification methods and the extended card, which this
	// host does not offer: they answer PushNotificationNotSupported and
	// AuthenticatedExtendedCardNotConfigured.
	MethodPushSet      = "tasks/pushNotificationConfig/set"
	MethodPushGet      = "tasks/pushNotificationConfig/get"
	MethodPushList     = "tasks/pushNotificationConfig/list"
	MethodPushDelete   = "tasks/pushNotificationConfig/delete"
	MethodExtendedCard = "agent/getAuthenticatedExtendedCard"
)

// The error codes: JSON-RPC 2.0's, and A2A's own (-32001 to -32007).
const (
	CodeParseError                = -32700
	CodeInvalidRequest            = -32600
	CodeMethodNotFound            = -32601
	CodeInvalidParams             = -32602
	CodeInternalError             = -32603
	CodeServerError               = -32000 // implementation-defined: see Error.Data
	CodeTaskNotFound              = -32001
	CodeTaskNotCancelable         = -32002
	CodePushNotSupported          = -32003
	CodeUnsupportedOperation      = -32004
	CodeContentTypeNotSupported   = -32005
	CodeInvalidAgentResponse      = -32006
	CodeExtendedCardNotConfigured = -32007
)

// Error is a JSON-RPC error object. Data, when set, is a JSON object; for
// CodeServerError its "code" names the server's reason (rate_limited,
// budget_exceeded, unavailable, too_slow, unauthorized).
type Error struct {
	Code    int            `json:"code"`
	Message string         `json:"message"`
	Data    map[string]any `json:"data,omitempty"`
}

// Error returns the message with its code.
func (e *Error) Error() string { return fmt.Sprintf("a2a: %s (%d)", e.Message, e.Code) }

// Errorf returns an Error of code with a formatted message.
func Errorf(code int, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// TaskNotFound is the error for a task id the caller has no task of:
// missing, or another tenant's (the two are indistinguishable).
func TaskNotFound(id string) *Error {
	return &Error{Code: CodeTaskNotFound, Message: fmt.Sprintf("task %q not found", id)}
}

// Request is a JSON-RPC request as [ParseRequest] read it.
type Request struct {
	// ID is the request's id, as it was sent: a JSON string or number.
	ID json.RawMessage
	// Method names the method.
	Method string
	// Params is the params object; nil when the request has none.
	Params json.RawMessage
}

// envelope is what ParseRequest reads of a request.
type envelope struct {
	JSONRPC *string         `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  *string         `json:"method"`
	Params  json.RawMessage `json:"params"`
}

// ParseRequest reads one JSON-RPC 2.0 request. A body that is not JSON is
// a CodeParseError; one that is not a request object (a batch, no
// "jsonrpc": "2.0", no method, an id that is neither a string nor a
// number, params that are not an object, or a field JSON-RPC does not
// define) is a CodeInvalidRequest. A request without an id (a
// notification) is refused too: every A2A method answers. The id read so
// far is returned with the error, so that the answer can carry it.
func ParseRequest(body []byte) (Request, *Error) {
	body = bytes.TrimSpace(body)
	if !json.Valid(body) {
		return Request{}, Errorf(CodeParseError, "the body is not JSON")
	}
	switch {
	case len(body) > 0 && body[0] == '[':
		return Request{}, Errorf(CodeInvalidRequest, "batches are not supported: send one request per HTTP request")
	case len(body) == 0 || body[0] != '{':
		return Request{}, Errorf(CodeInvalidRequest, "the body is not a JSON-RPC request object")
	}
	var env envelope
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&env); err != nil {
		// The id, if it can be read, still goes back with the error.
		var loose envelope
		json.Unmarshal(body, &loose)
		req := Request{}
		if validID(loose.ID) {
			req.ID = loose.ID
		}
		return req, Errorf(CodeInvalidRequest, "the request: %s", fieldError(err))
	}
	req := Request{}
	if validID(env.ID) {
		req.ID = env.ID
	}
	switch {
	case env.JSONRPC == nil || *env.JSONRPC != "2.0":
		return req, Errorf(CodeInvalidRequest, `field "jsonrpc": want "2.0"`)
	case len(env.ID) == 0 || string(env.ID) == "null":
		return req, Errorf(CodeInvalidRequest, `field "id" is required: a string or a number (notifications are not supported)`)
	case !validID(env.ID):
		return req, Errorf(CodeInvalidRequest, `field "id": want a string or a number`)
	case env.Method == nil || *env.Method == "":
		return req, Errorf(CodeInvalidRequest, `field "method" is required`)
	}
	req.Method = *env.Method
	if p := bytes.TrimSpace(env.Params); len(p) > 0 && string(p) != "null" {
		if p[0] != '{' {
			return req, Errorf(CodeInvalidParams, `field "params": want an object`)
		}
		req.Params = p
	}
	return req, nil
}

// validID tells whether id is a JSON string or number.
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	switch c := id[0]; {
	case c == '"':
		var s string
		return json.Unmarshal(id, &s) == nil
	case c == '-' || (c >= '0' && c <= '9'):
		var n json.Number
		return json.Unmarshal(id, &n) == nil
	}
	return false
}

// Response is a JSON-RPC response: Result, or Error.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  any             `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Result answers the request id with v.
func Result(id json.RawMessage, v any) Response {
	return Response{JSONRPC: "2.0", ID: idOrNull(id), Result: v}
}

// Failure answers the request id with err; an id that could not be read
// is null.
func Failure(id json.RawMessage, err *Error) Response {
	return Response{JSONRPC: "2.0", ID: idOrNull(id), Error: err}
}

func idOrNull(id json.RawMessage) json.RawMessage {
	if len(id) == 0 {
		return json.RawMessage("null")
	}
	return id
}

// decodeParams reads params into v strictly: unknown fields, wrong types
// and trailing data are CodeInvalidParams errors that name the field.
func decodeParams(params json.RawMessage, v any) *Error {
	if len(params) == 0 {
		return Errorf(CodeInvalidParams, `field "params" is required`)
	}
	dec := json.NewDecoder(bytes.NewReader(params))
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil {
		if _, rerr := dec.Token(); rerr != io.EOF {
			err = errors.New("params hold more than one JSON value")
		}
	}
	if err != nil {
		return Errorf(CodeInvalidParams, "params: %s", fieldError(err))
	}
	return nil
}

// fieldError says what is wrong with a JSON value, naming the field.
func fieldError(err error) string {
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &typ) && typ.Field != "":
		return fmt.Sprintf("field %q: want %s, got a JSON %s", typ.Field, typ.Type, typ.Value)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}
