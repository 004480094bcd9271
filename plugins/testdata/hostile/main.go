// Command hostile is a test plugin that misbehaves on purpose, one tool per
// misbehaviour, plus healthy tools to check the host still serves.
package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/agentichost/agentic/pdk"
	extism "github.com/extism/go-pdk"
)

type none struct{}

type sizeIn struct {
	Bytes int `json:"bytes"`
}

type urlIn struct {
	URL    string `json:"url"`
	Method string `json:"method"`
	Body   string `json:"body"`
}

type kvIn struct {
	Key   string `json:"key"`
	Value string `json:"value"`
}

var sink [][]byte

// calls counts the calls an instance served: a fresh instance starts at 0.
var calls int

func tool[In, Out any](name string, effect pdk.Effect, fn func(pdk.Call, In) (Out, error)) {
	// The tools that hang declare a 1s timeout of their own, below the
	// tenant's limit; the others (a memory bomb needs time to exhaust its
	// memory on a loaded machine) get the tenant's.
	var timeout time.Duration
	if name == "spin" || name == "sleep" {
		timeout = time.Second
	}
	pdk.RegisterTool(pdk.Tool{Name: name, Description: "hostile test tool " + name, Effect: effect, Timeout: timeout}, fn)
}

func init() {
	tool("ok", pdk.Read, func(c pdk.Call, _ none) (map[string]any, error) {
		calls++
		return map[string]any{"ok": true, "calls": calls, "tenant": c.Tenant, "call_id": c.ID}, nil
	})
	tool("echo", pdk.Read, func(_ pdk.Call, in map[string]any) (map[string]any, error) { return in, nil })
	tool("text", pdk.Read, func(_ pdk.Call, _ none) (string, error) { return "plain text", nil })
	tool("fail", pdk.Read, func(_ pdk.Call, _ none) (none, error) { return none{}, errors.New("account 7 not found") })
	tool("panic", pdk.Read, func(_ pdk.Call, _ none) (none, error) { panic("boom") })
	tool("spin", pdk.Read, func(_ pdk.Call, _ none) (none, error) {
		for {
			calls++
		}
	})
	tool("sleep", pdk.Read, func(_ pdk.Call, _ none) (none, error) {
		time.Sleep(time.Hour)
		return none{}, nil
	})
	tool("memory_bomb", pdk.Read, func(_ pdk.Call, _ none) (none, error) {
		for {
			sink = append(sink, make([]byte, 1<<20))
		}
	})
	tool("var_bomb", pdk.Read, func(_ pdk.Call, _ none) (none, error) {
		// Extism vars are held by the host: fill them past their limit.
		chunk := make([]byte, 64<<10)
		for i := 0; ; i++ {
			extism.SetVar("v"+strconv.Itoa(i), chunk)
		}
	})
	tool("trap", pdk.Read, func(_ pdk.Call, _ none) (int, error) {
		// An access far outside linear memory: a Wasm trap, not a Go panic.
		p := (*int)(unsafe.Add(unsafe.Pointer(&calls), 0x7ffffff0))
		return *p, nil
	})
	tool("exit", pdk.Read, func(_ pdk.Call, _ none) (none, error) {
		os.Exit(3)
		return none{}, nil
	})
	tool("exit0", pdk.Read, func(_ pdk.Call, _ none) (none, error) {
		os.Exit(0)
		return none{}, nil
	})
	tool("big_output", pdk.Read, func(_ pdk.Call, in sizeIn) (string, error) {
		if in.Bytes == 0 {
			in.Bytes = 100 << 20
		}
		return strings.Repeat("x", in.Bytes), nil
	})
	tool("read_file", pdk.Read, func(_ pdk.Call, _ none) (string, error) {
		b, err := os.ReadFile("/etc/passwd")
		if err != nil {
			return "", err
		}
		return string(b), nil
	})
	tool("list_root", pdk.Read, func(_ pdk.Call, _ none) ([]string, error) {
		entries, err := os.ReadDir("/")
		if err != nil {
			return nil, err
		}
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		return names, nil
	})
	tool("env", pdk.Read, func(_ pdk.Call, _ none) ([]string, error) { return os.Environ(), nil })
	tool("fetch", pdk.External, func(_ pdk.Call, in urlIn) (map[string]any, error) {
		res, err := pdk.Fetch(pdk.HTTPRequest{Method: in.Method, URL: in.URL, Body: []byte(in.Body)})
		if err != nil {
			return nil, err
		}
		return map[string]any{"status": res.Status, "body": string(res.Body), "location": res.Headers["location"]}, nil
	})
	tool("kv", pdk.Write, func(_ pdk.Call, in kvIn) (map[string]any, error) {
		if in.Value != "" {
			if err := pdk.KVSet(in.Key, []byte(in.Value)); err != nil {
				return nil, err
			}
		}
		v, ok, err := pdk.KVGet(in.Key)
		if err != nil {
			return nil, err
		}
		return map[string]any{"value": string(v), "found": ok}, nil
	})
	tool("log", pdk.Read, func(_ pdk.Call, in sizeIn) (none, error) {
		for i := 0; i < in.Bytes; i++ {
			pdk.Logf(pdk.LogInfo, "line %d", i)
		}
		return none{}, nil
	})
}

func main() {}
