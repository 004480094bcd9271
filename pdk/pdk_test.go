package pdk

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func reset() {
	registry.tools, registry.validators, registry.policies, registry.problems = nil, nil, nil, nil
	registry.needs = nil
}

type greetIn struct {
	Name string `json:"name"`
}

func register() {
	reset()
	RegisterTool(Tool{
		Name:        "greet",
		Description: "Greet someone.",
		InputSchema: `{"type":"object","properties":{"name":{"type":"string"}}}`,
		Effect:      Read,
		Idempotent:  true,
		Timeout:     2 * time.Second,
	}, func(c Call, in greetIn) (string, error) {
		if in.Name == "" {
			return "", errors.New("name is required")
		}
		return "hello " + in.Name + " (" + c.ID + ")", nil
	})
	RegisterTool(Tool{Name: "boom"}, func(Call, struct{}) (int, error) { panic("kaboom") })
	RegisterValidator(Validator{Name: "title", Schema: `{"type":"object"}`}, func(d struct {
		Title string `json:"title"`
	}) (any, error) {
		switch {
		case d.Title == "":
			return nil, Invalid("/title: must not be empty")
		case d.Title == "broken":
			return nil, errors.New("validator crashed")
		case d.Title == "lower":
			return map[string]string{"title": strings.ToUpper(d.Title)}, nil
		}
		return nil, nil
	})
	RegisterPolicy(Policy{Name: "side_effects"}, func(r PolicyRequest) (Decision, error) {
		if r.Tool.Effect == External {
			return Decision{Decision: RequireApproval, Reason: "external effect", Summary: r.Tool.Name}, nil
		}
		if r.Tool.Name == "weird" {
			return Decision{Decision: "maybe"}, nil
		}
		return Decision{Decision: Allow}, nil
	})
}

func TestDescribe(t *testing.T) {
	register()
	var d describeOut
	if err := json.Unmarshal(Dispatch("describe", nil), &d); err != nil {
		t.Fatal(err)
	}
	if d.ABI != ABIVersion || len(d.Tools) != 2 || len(d.Validators) != 1 || len(d.Policies) != 1 {
		t.Fatalf("describe: %+v", d)
	}
	g := d.Tools[0]
	if g.Name != "greet" || g.Effect != Read || !g.Idempotent || g.TimeoutMS != 2000 || !strings.Contains(string(g.InputSchema), `"name"`) {
		t.Fatalf("greet: %+v", g)
	}
	if b := d.Tools[1]; b.Effect != Read || string(b.InputSchema) != `{"type":"object"}` {
		t.Fatalf("defaults: %+v", b)
	}
}

// TestDescribeNeeds: describe reports needs only once Need says them, the
// last call winning, hosts never null.
func TestDescribeNeeds(t *testing.T) {
	register()
	defer reset()
	if out := string(Dispatch("describe", nil)); strings.Contains(out, `"needs"`) {
		t.Fatalf("describe without Need: %s", out)
	}
	Need(Needs{AllowedHosts: []string{"a.example.com"}})
	Need(Needs{KV: true})
	var d describeOut
	if err := json.Unmarshal(Dispatch("describe", nil), &d); err != nil {
		t.Fatal(err)
	}
	if d.Needs == nil || !d.Needs.KV || d.Needs.AllowedHosts == nil || len(d.Needs.AllowedHosts) != 0 {
		t.Fatalf("needs: %+v", d.Needs)
	}
}

func TestRegistrationProblems(t *testing.T) {
	reset()
	defer reset()
	RegisterTool(Tool{Name: "bad name"}, func(Call, struct{}) (int, error) { return 0, nil })
	RegisterTool(Tool{Name: "x", InputSchema: `{`}, func(Call, struct{}) (int, error) { return 0, nil })
	RegisterTool(Tool{Name: "x"}, func(Call, struct{}) (int, error) { return 0, nil })
	RegisterTool(Tool{Name: "y", Effect: "sometimes"}, func(Call, struct{}) (int, error) { return 0, nil })
	out := string(Dispatch("describe", nil))
	for _, want := range []string{"bad name", "not valid JSON", "registered twice", "unknown effect"} {
		if !strings.Contains(out, want) {
			t.Errorf("describe %s does not mention %q", out, want)
		}
	}
	if !strings.HasPrefix(out, `{"error":`) {
		t.Errorf("describe with problems: %s", out)
	}
}

func TestCall(t *testing.T) {
	register()
	tests := []struct{ in, want string }{
		{`{"tool":"greet","input":{"name":"Ada"},"call_id":"c1"}`, `{"output":"hello Ada (c1)"}`},
		{`{"tool":"greet","input":{}}`, `{"error":"name is required"}`},
		{`{"tool":"greet","input":[1]}`, `{"error":"invalid input: json: cannot unmarshal array into Go value of type pdk.greetIn"}`},
		{`{"tool":"nope"}`, `{"error":"pdk: unknown tool \"nope\""}`},
		{`not json`, `{"error":"pdk: malformed call request: invalid character 'o' in literal null (expecting 'u')"}`},
	}
	for _, tt := range tests {
		if got := string(Dispatch("call", []byte(tt.in))); got != tt.want {
			t.Errorf("call %s = %s, want %s", tt.in, got, tt.want)
		}
	}
	if got := string(Dispatch("call", []byte(`{"tool":"boom"}`))); !strings.HasPrefix(got, `{"error":"panic in call: kaboom`) {
		t.Errorf("panic: %s", got)
	}
	if got := string(Dispatch("nope", nil)); !strings.Contains(got, "unknown export") {
		t.Errorf("unknown export: %s", got)
	}
}

func TestValidate(t *testing.T) {
	register()
	tests := []struct{ in, want string }{
		{`{"validator":"title","deliverable":{"title":"ok"}}`, `{"ok":true,"value":{"title":"ok"}}`},
		{`{"validator":"title","deliverable":{"title":"lower"}}`, `{"ok":true,"value":{"title":"LOWER"}}`},
		{`{"validator":"title","deliverable":{"title":""}}`, `{"ok":false,"errors":["/title: must not be empty"]}`},
		{`{"validator":"title","deliverable":[1]}`, `{"ok":false,"errors":["/: json: cannot unmarshal array into Go value of type struct { Title string \"json:\\\"title\\\"\" }"]}`},
		{`{"validator":"title","deliverable":{"title":"broken"}}`, `{"error":"validator crashed"}`},
		{`{"validator":"nope","deliverable":{}}`, `{"error":"pdk: unknown validator \"nope\""}`},
	}
	for _, tt := range tests {
		if got := string(Dispatch("validate", []byte(tt.in))); got != tt.want {
			t.Errorf("validate %s = %s, want %s", tt.in, got, tt.want)
		}
	}
}

func TestDecide(t *testing.T) {
	register()
	tests := []struct{ in, want string }{
		{`{"policy":"side_effects","tool":{"name":"publish","effect":"external"}}`, `{"decision":"require_approval","reason":"external effect","summary":"publish"}`},
		{`{"policy":"side_effects","tool":{"name":"get","effect":"read"}}`, `{"decision":"allow"}`},
		{`{"policy":"side_effects","tool":{"name":"weird","effect":"read"}}`, `{"error":"policy side_effects returned the unknown decision \"maybe\""}`},
	}
	for _, tt := range tests {
		if got := string(Dispatch("decide", []byte(tt.in))); got != tt.want {
			t.Errorf("decide %s = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// TestHostError: a host's refusal wraps ErrHostDenied and reads as one
// sentence: the function, then the host's reason.
func TestHostError(t *testing.T) {
	err := hostError("wait_event", []byte("denied: bad key: empty"))
	if !errors.Is(err, ErrHostDenied) || err.Error() != "pdk: denied by the host: wait_event: bad key: empty" {
		t.Errorf("a refusal: %q", err)
	}
	err = hostError("kv_get", []byte("the store is down"))
	if errors.Is(err, ErrHostDenied) || err.Error() != "pdk: kv_get: the store is down" {
		t.Errorf("a failure: %q", err)
	}
}
