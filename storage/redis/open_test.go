package redis_test

import (
	"net"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/storage/redis"
)

// TestOptions: every invalid field is reported, at once, before any
// connection.
func TestOptions(t *testing.T) {
	_, err := redis.Open(t.Context(), "redis://127.0.0.1:1/0", redis.Options{
		Prefix: "a{b}", Tenant: "a:b", PageSize: -1, DialTimeout: -time.Second, ReadTimeout: -2, WatchBlock: time.Microsecond,
		WatchPoolSize: -1,
	})
	if err == nil {
		t.Fatal("Open with invalid options: no error")
	}
	for _, want := range []string{"prefix", "tenant", "page size", "dial timeout", "read timeout", "watch block", "watch pool size"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention the %s", err, want)
		}
	}
	if _, err := redis.New(nil, redis.Options{}); err == nil {
		t.Error("New(nil): no error")
	}
	c := goredis.NewClient(&goredis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	if _, err := redis.New(c, redis.Options{Tenant: "x y"}); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Errorf("New with a bad tenant = %v, want an error about it", err)
	}
}

// TestNew: a Store over the caller's client works, and its Close leaves the
// client open.
func TestNew(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, redistest.Options{})
	c := goredis.NewClient(&goredis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	st, err := redis.New(c, redis.Options{})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ctx := t.Context()
	if err := st.Append(ctx, "new", poke("new", 0)); err != nil {
		t.Fatal(err)
	}
	if got, err := st.Load(ctx, "new"); err != nil || len(got) != 1 {
		t.Fatalf("Load = %d events, %v", len(got), err)
	}
	if err := st.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Errorf("the caller's client after the Store's Close: %v", err)
	}
}

func TestOpenErrors(t *testing.T) {
	t.Parallel()
	// A port nobody listens on.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	for _, tc := range []struct{ url, want string }{
		{"http://x", `unknown scheme "http"`},
		{"redis://:secret@" + dead + "/0", "xxxxx"},
		{"redis+cluster:///0", "no host"},
		{"redis+cluster://h1:1,h2:2/3", "database 0 only"},
		{"redis://" + dead + "/x", "invalid database"},
	} {
		start := time.Now()
		_, err := redis.Open(t.Context(), tc.url, redis.Options{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Open(%s) = %v, want an error saying %q", tc.url, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%s): the error shows the password: %v", tc.url, err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("Open(%s) took %v", tc.url, took)
		}
	}
}
