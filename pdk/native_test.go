//go:build !wasip1

package pdk

import (
	"errors"
	"testing"
)

func TestHostFunctionsNative(t *testing.T) {
	TestHost = &FakeHost{KV: map[string][]byte{}}
	if _, ok, err := KVGet("k"); ok || err != nil {
		t.Fatalf("get missing: %v %v", ok, err)
	}
	if err := KVSet("k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := KVGet("k"); !ok || err != nil || string(v) != "v" {
		t.Fatalf("get: %q %v %v", v, ok, err)
	}
	if err := KVDelete("k"); err != nil {
		t.Fatal(err)
	}
	Log(LogWarn, "careful")
	if len(TestHost.Logs) != 1 || TestHost.Logs[0] != "WARN careful" {
		t.Fatalf("logs %v", TestHost.Logs)
	}
	if _, err := Fetch(HTTPRequest{URL: "https://example.com"}); !errors.Is(err, ErrHostDenied) {
		t.Fatalf("fetch without a fake: %v", err)
	}
	TestHost.Fetch = func(r HTTPRequest) (*HTTPResponse, error) {
		return &HTTPResponse{Status: 201, Body: append([]byte(r.Method+" "), r.Body...)}, nil
	}
	res, err := Fetch(HTTPRequest{Method: "POST", URL: "https://example.com", Body: []byte("hi")})
	if err != nil || res.Status != 201 || string(res.Body) != "POST hi" {
		t.Fatalf("fetch: %+v %v", res, err)
	}
	TestHost.KV = nil
	if err := KVSet("k", nil); !errors.Is(err, ErrHostDenied) {
		t.Fatalf("kv denied: %v", err)
	}
}
