package a2a

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/a2aproject/a2a-go/a2a"

	"github.com/agentichost/agentic/ledger"
)

// TestParseRequest: every request that is not one JSON-RPC 2.0 request
// with an id is refused with the code JSON-RPC gives it, naming what is
// wrong, and the id goes back when it could be read.
func TestParseRequest(t *testing.T) {
	for _, c := range []struct {
		name, body string
		code       int
		want, id   string
	}{
		{"not JSON", `{"jsonrpc":`, CodeParseError, "not JSON", ""},
		{"a batch", `[{"jsonrpc":"2.0","id":1,"method":"tasks/get"}]`, CodeInvalidRequest, "batches", ""},
		{"a string", `"hello"`, CodeInvalidRequest, "not a JSON-RPC request object", ""},
		{"no version", `{"id":1,"method":"tasks/get"}`, CodeInvalidRequest, `"jsonrpc"`, "1"},
		{"version 1", `{"jsonrpc":"1.0","id":1,"method":"tasks/get"}`, CodeInvalidRequest, `"jsonrpc"`, "1"},
		{"no id", `{"jsonrpc":"2.0","method":"tasks/get"}`, CodeInvalidRequest, "notifications", ""},
		{"null id", `{"jsonrpc":"2.0","id":null,"method":"tasks/get"}`, CodeInvalidRequest, "notifications", ""},
		{"object id", `{"jsonrpc":"2.0","id":{},"method":"tasks/get"}`, CodeInvalidRequest, `"id"`, ""},
		{"no method", `{"jsonrpc":"2.0","id":"a"}`, CodeInvalidRequest, `"method"`, `"a"`},
		{"method a number", `{"jsonrpc":"2.0","id":"a","method":3}`, CodeInvalidRequest, `"method"`, `"a"`},
		{"unknown field", `{"jsonrpc":"2.0","id":7,"method":"tasks/get","extra":1}`, CodeInvalidRequest, `unknown field "extra"`, "7"},
		{"params an array", `{"jsonrpc":"2.0","id":7,"method":"tasks/get","params":[1]}`, CodeInvalidParams, "want an object", "7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			req, err := ParseRequest([]byte(c.body))
			if err == nil || err.Code != c.code || !strings.Contains(err.Message, c.want) {
				t.Fatalf("error %+v, want code %d saying %q", err, c.code, c.want)
			}
			if string(req.ID) != c.id {
				t.Errorf("id %s, want %q", req.ID, c.id)
			}
			b, _ := json.Marshal(Failure(req.ID, err))
			if !json.Valid(b) || !strings.Contains(string(b), `"jsonrpc":"2.0"`) {
				t.Errorf("answer %s", b)
			}
		})
	}
	req, err := ParseRequest([]byte(` {"jsonrpc":"2.0","id":"r1","method":"tasks/get","params":{"id":"run_1"}} `))
	if err != nil || req.Method != MethodGet || string(req.ID) != `"r1"` || string(req.Params) != `{"id":"run_1"}` {
		t.Fatalf("%+v %v", req, err)
	}
}

const goodMessage = `{"kind":"message","messageId":"m1","role":"user","parts":[{"kind":"text","text":"hello"}]}`

// TestDecodeSend: a message/send's params are read strictly; every bad
// one is an error with its code, naming the field.
func TestDecodeSend(t *testing.T) {
	for _, c := range []struct {
		name, params string
		code         int
		want         string
	}{
		{"no params", ``, CodeInvalidParams, `"params" is required`},
		{"no message", `{}`, CodeInvalidParams, `"message" is required`},
		{"unknown field", `{"message":` + goodMessage + `,"extra":true}`, CodeInvalidParams, `unknown field "extra"`},
		{"message a string", `{"message":"hi"}`, CodeInvalidParams, `"message"`},
		{"no messageId", `{"message":{"role":"user","parts":[{"kind":"text","text":"hi"}]}}`, CodeInvalidParams, `"message.messageId" is required`},
		{"agent role", `{"message":{"messageId":"m","role":"agent","parts":[{"kind":"text","text":"hi"}]}}`, CodeInvalidParams, `want "user"`},
		{"no role", `{"message":{"messageId":"m","parts":[{"kind":"text","text":"hi"}]}}`, CodeInvalidParams, `"message.role"`},
		{"wrong kind", `{"message":{"kind":"task","messageId":"m","role":"user","parts":[{"kind":"text","text":"hi"}]}}`, CodeInvalidParams, `want "message"`},
		{"no parts", `{"message":{"messageId":"m","role":"user","parts":[]}}`, CodeInvalidParams, `"message.parts" is empty`},
		{"part without kind", `{"message":{"messageId":"m","role":"user","parts":[{"text":"hi"}]}}`, CodeInvalidParams, `parts[0]: field "kind" is required`},
		{"unknown part kind", `{"message":{"messageId":"m","role":"user","parts":[{"kind":"video"}]}}`, CodeInvalidParams, `"video"`},
		{"text part without text", `{"message":{"messageId":"m","role":"user","parts":[{"kind":"text"}]}}`, CodeInvalidParams, `"text" alone`},
		{"part with an unknown field", `{"message":{"messageId":"m","role":"user","parts":[{"kind":"text","text":"hi","x":1}]}}`, CodeInvalidParams, `unknown field "x"`},
		{"file with both", `{"message":{"messageId":"m","role":"user","parts":[{"kind":"file","file":{"bytes":"aGk=","uri":"https://x"}}]}}`, CodeInvalidParams, "exactly one"},
		{"file bytes not base64", `{"message":{"messageId":"m","role":"user","parts":[{"kind":"file","file":{"bytes":"!!"}}]}}`, CodeInvalidParams, "not base64"},
		{"file uri of a file", `{"message":{"messageId":"m","role":"user","parts":[{"kind":"file","file":{"uri":"file:///etc/passwd"}}]}}`, CodeInvalidParams, "http(s)"},
		{"data not an object", `{"message":{"messageId":"m","role":"user","parts":[{"kind":"data","data":[1]}]}}`, CodeInvalidParams, "JSON object"},
		{"push config", `{"message":` + goodMessage + `,"configuration":{"pushNotificationConfig":{"url":"https://x"}}}`, CodePushNotSupported, "push notifications"},
		{"blocking a string", `{"message":` + goodMessage + `,"configuration":{"blocking":"yes"}}`, CodeInvalidParams, `blocking`},
		{"negative history", `{"message":` + goodMessage + `,"configuration":{"historyLength":-1}}`, CodeInvalidParams, "historyLength"},
		{"long messageId", `{"message":{"messageId":"` + strings.Repeat("m", 256) + `","role":"user","parts":[{"kind":"text","text":"hi"}]}}`, CodeInvalidParams, "255"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := DecodeSend(json.RawMessage(c.params))
			if err == nil || err.Code != c.code || !strings.Contains(err.Message, c.want) {
				t.Fatalf("error %+v, want code %d saying %q", err, c.code, c.want)
			}
		})
	}
	p, err := DecodeSend(json.RawMessage(`{"message":{"kind":"message","messageId":"m1","contextId":"ctx","taskId":"run_1","role":"user","parts":[` +
		`{"kind":"text","text":"hello"},{"kind":"file","file":{"name":"a.png","mimeType":"image/png","bytes":"aGk="}},` +
		`{"kind":"file","file":{"uri":"https://example.com/a.pdf","mimeType":"application/pdf","name":"a.pdf"}},{"kind":"data","data":{"city":"Paris"}}]},` +
		`"configuration":{"blocking":true,"acceptedOutputModes":["text/plain"],"historyLength":2}}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Message.ID != "m1" || p.Message.ContextID != "ctx" || p.Message.TaskID != "run_1" || len(p.Message.Parts) != 4 || !*p.Config.Blocking || *p.Config.HistoryLength != 2 {
		t.Fatalf("%+v", p)
	}
	c, cerr := ContentOf(p.Message)
	if cerr != nil {
		t.Fatal(cerr)
	}
	if c.Text != "hello\n{\"city\":\"Paris\"}" || len(c.Parts) != 2 || len(c.Decisions) != 0 {
		t.Fatalf("%+v", c)
	}
	if img := c.Parts[0]; img.Type != ledger.PartImage || string(img.Data) != "hi" || img.MIME != "image/png" {
		t.Errorf("image part %+v", img)
	}
	if f := c.Parts[1]; f.Type != ledger.PartFile || f.URL != "https://example.com/a.pdf" || f.Name != "a.pdf" {
		t.Errorf("file part %+v", f)
	}
}

// TestContentOfDecisions: a data part with approval_id is a decision,
// read strictly, and a message that decides carries decisions alone.
func TestContentOfDecisions(t *testing.T) {
	msg := func(parts ...a2a.Part) *a2a.Message {
		return &a2a.Message{ID: "m", Role: a2a.MessageRoleUser, Parts: parts}
	}
	c, err := ContentOf(msg(a2a.DataPart{Data: map[string]any{"approval_id": "apr_1", "approve": true}},
		a2a.DataPart{Data: map[string]any{"approval_id": "apr_2", "approve": false, "reason": "not today"}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Decisions) != 2 || !reflect.DeepEqual(c.Decisions[0], Decision{ApprovalID: "apr_1", Approve: true}) ||
		!reflect.DeepEqual(c.Decisions[1], Decision{ApprovalID: "apr_2", Reason: "not today"}) {
		t.Fatalf("%+v", c.Decisions)
	}
	c, err = ContentOf(msg(a2a.DataPart{Data: map[string]any{"approval_id": "apr_1", "approve": true, "input": map[string]any{"title": "Friday"}}},
		a2a.DataPart{Data: map[string]any{"approval_id": "apr_2", "response": "done by hand"}}))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Decisions) != 2 || !reflect.DeepEqual(c.Decisions[0], Decision{ApprovalID: "apr_1", Approve: true, Input: json.RawMessage(`{"title":"Friday"}`)}) ||
		!reflect.DeepEqual(c.Decisions[1], Decision{ApprovalID: "apr_2", Response: "done by hand"}) {
		t.Fatalf("edit and respond: %+v", c.Decisions)
	}
	for _, bad := range []struct {
		name string
		m    *a2a.Message
		want string
	}{
		{"no approve", msg(a2a.DataPart{Data: map[string]any{"approval_id": "apr_1"}}), `"approve" is required`},
		{"approve a string", msg(a2a.DataPart{Data: map[string]any{"approval_id": "apr_1", "approve": "yes"}}), `"approve" is required`},
		{"id a number", msg(a2a.DataPart{Data: map[string]any{"approval_id": 3, "approve": true}}), `"approval_id"`},
		{"reason a number", msg(a2a.DataPart{Data: map[string]any{"approval_id": "a", "approve": true, "reason": 3}}), `"reason"`},
		{"unknown field", msg(a2a.DataPart{Data: map[string]any{"approval_id": "a", "approve": true, "by": "me"}}), `unknown field "by"`},
		{"input without approve", msg(a2a.DataPart{Data: map[string]any{"approval_id": "a", "approve": false, "input": map[string]any{}}}), `field "input"`},
		{"input not an object", msg(a2a.DataPart{Data: map[string]any{"approval_id": "a", "approve": true, "input": "x"}}), `field "input"`},
		{"response and approve", msg(a2a.DataPart{Data: map[string]any{"approval_id": "a", "approve": true, "response": "x"}}), `give one of them`},
		{"empty response", msg(a2a.DataPart{Data: map[string]any{"approval_id": "a", "response": " "}}), `field "response"`},
		{"text beside", msg(a2a.TextPart{Text: "yes"}, a2a.DataPart{Data: map[string]any{"approval_id": "a", "approve": true}}), "decisions alone"},
		{"empty text", msg(a2a.TextPart{Text: "  "}), "empty"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			_, err := ContentOf(bad.m)
			if err == nil || err.Code != CodeInvalidParams || !strings.Contains(err.Message, bad.want) {
				t.Fatalf("error %+v, want invalid params saying %q", err, bad.want)
			}
		})
	}
}

func TestDecodeTaskParams(t *testing.T) {
	if p, err := DecodeTaskQuery(json.RawMessage(`{"id":"run_1","historyLength":3}`)); err != nil || p.ID != "run_1" || *p.HistoryLength != 3 {
		t.Fatalf("%+v %v", p, err)
	}
	if p, err := DecodeTaskID(json.RawMessage(`{"id":"run_1","metadata":{"a":1}}`)); err != nil || p.ID != "run_1" {
		t.Fatalf("%+v %v", p, err)
	}
	for _, bad := range []string{``, `{}`, `{"id":""}`, `{"id":3}`, `{"id":"run_1","extra":1}`, `{"id":"run_1","historyLength":-2}`} {
		if _, err := DecodeTaskQuery(json.RawMessage(bad)); err == nil || err.Code != CodeInvalidParams {
			t.Errorf("tasks/get params %s: %v, want invalid params", bad, err)
		}
	}
}

// FuzzDecode: whatever arrives, reading it never panics, and what is
// refused is refused with a JSON-RPC code.
func FuzzDecode(f *testing.F) {
	for _, s := range []string{`{"jsonrpc":"2.0","id":1,"method":"message/send","params":{"message":` + goodMessage + `}}`,
		`{"jsonrpc":"2.0","id":"x","method":"tasks/get","params":{"id":"run_1"}}`, `[]`, `{"params":{"message":{"parts":[{"kind":"file","file":{}}]}}}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseRequest(body)
		if err != nil {
			if err.Code > -32000 || err.Code < -32768 {
				t.Fatalf("code %d", err.Code)
			}
			return
		}
		if p, err := DecodeSend(req.Params); err == nil {
			ContentOf(p.Message)
		}
		DecodeTaskQuery(req.Params)
		DecodeTaskID(req.Params)
	})
}
