package plugins

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentichost/agentic/host"
)

func TestLimitsNormalize(t *testing.T) {
	l, err := Limits{}.normalize()
	if err != nil {
		t.Fatal(err)
	}
	if l.MemoryPages != DefaultMemoryPages || l.CallTimeout != DefaultCallTimeout || l.Instances != DefaultInstances ||
		l.MaxOutputBytes != DefaultMaxOutputBytes || l.KV || len(l.AllowedHosts) != 0 || l.AllowPrivateNetwork || l.MaxRedirects != 0 {
		t.Fatalf("defaults: %+v", l)
	}
	_, err = Limits{MemoryPages: 70000, CallTimeout: -1, Instances: -2, AllowedHosts: []string{"http://x", "a.b:99999"}}.normalize()
	if !errors.Is(err, ErrInvalidLimits) {
		t.Fatalf("bad limits: %v", err)
	}
	for _, want := range []string{"MemoryPages", "CallTimeout", "Instances", `"http://x"`, "bad port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%v does not mention %s", err, want)
		}
	}
	m := Limits{MemoryPages: 100, CallTimeout: 1500 * time.Millisecond}.Manifest([]byte("wasm"))
	if m.Memory.MaxPages != 100 || m.Timeout != 1500 || m.Memory.MaxVarBytes != DefaultMaxVarBytes || m.Memory.MaxHttpResponseBytes != DefaultMaxHTTPResponseBytes ||
		len(m.AllowedHosts) != 0 || len(m.AllowedPaths) != 0 {
		t.Fatalf("manifest %+v", m)
	}
	if m := (Limits{MaxVarBytes: -1}).Manifest(nil); m.Memory.MaxVarBytes != 0 {
		t.Fatalf("MaxVarBytes -1 gives Extism %d, want 0 (disabled)", m.Memory.MaxVarBytes)
	}
	if _, err := (Limits{MaxVarBytes: -2}).normalize(); !errors.Is(err, ErrInvalidLimits) {
		t.Fatalf("MaxVarBytes -2: %v", err)
	}
}

func TestHostRules(t *testing.T) {
	tests := []struct {
		rule, scheme, host, port string
		match                    bool
	}{
		{"example.com", "https", "example.com", "443", true},
		{"example.com", "https", "api.example.com", "443", false},
		{"*.example.com", "https", "api.example.com", "443", true},
		{"*.example.com", "https", "example.com", "443", false},
		{"*.example.com", "https", "evil-example.com", "443", false},
		{"example.com:8443", "https", "example.com", "443", false},
		{"example.com:8443", "https", "example.com", "8443", true},
		{"example.com:8443", "http", "example.com", "8443", true},
		{"EXAMPLE.com", "http", "example.com", "80", true},
		// Without a port: the scheme's default port, no other.
		{"example.com", "https", "example.com", "8443", false},
		{"example.com", "http", "example.com", "443", false},
		{"example.com", "https", "example.com", "80", false},
		{"*.example.com", "https", "api.example.com", "6379", false},
	}
	for _, tt := range tests {
		r, err := parseHostRule(tt.rule)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.match(tt.scheme, tt.host, tt.port); got != tt.match {
			t.Errorf("%s matches %s://%s:%s = %v", tt.rule, tt.scheme, tt.host, tt.port, got)
		}
	}
}

func TestPublicAddr(t *testing.T) {
	for _, s := range []string{"127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "0.0.0.0", "100.64.1.1",
		"::1", "fe80::1", "fc00::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::a00:1", "2002:a00:1::", "224.0.0.1", "255.255.255.255"} {
		if publicAddr(netip.MustParseAddr(s)) {
			t.Errorf("%s counted as public", s)
		}
	}
	for _, s := range []string{"1.1.1.1", "93.184.216.34", "2606:4700:4700::1111"} {
		if !publicAddr(netip.MustParseAddr(s)) {
			t.Errorf("%s counted as private", s)
		}
	}
}

func TestStderrWriter(t *testing.T) {
	w := &stderrWriter{max: 8}
	w.Write([]byte("fatal: oom\n"))
	w.Write([]byte("stack stack stack end"))
	if got := w.String(); got != "fatal: o\n…\ntack end" {
		t.Fatalf("got %q", got)
	}
	w.reset()
	w.Write([]byte("short"))
	if got := w.String(); got != "short" {
		t.Fatalf("got %q", got)
	}
}

// TestPoolBound: a pool never holds more instances than its bound, and a
// waiter gets an instance freed by another.
func TestPoolBound(t *testing.T) {
	p := newPool(2)
	var mu sync.Mutex
	live, maxLive := 0, 0
	create := func(context.Context) (*instance, error) {
		mu.Lock()
		defer mu.Unlock()
		live++
		maxLive = max(maxLive, live)
		return &instance{}, nil
	}
	var wg sync.WaitGroup
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in, err := p.get(context.Background(), create)
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(time.Millisecond)
			p.put(in)
		}()
	}
	wg.Wait()
	if maxLive > 2 {
		t.Fatalf("%d instances live at once", maxLive)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	a, _ := p.get(ctx, create)
	b, _ := p.get(ctx, create)
	if _, err := p.get(ctx, create); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("third get on a full pool: %v", err)
	}
	p.put(a)
	p.put(b)
}

func TestParseDescription(t *testing.T) {
	good := `{"abi":"1.3","tools":[{"name":"b","input_schema":{"type":"object"},"effect":"read"},{"name":"a","effect":"external","timeout_ms":50}],"validators":[{"name":"v"}],"policies":[{"name":"p"}],"future_field":1}`
	d, schemas, err := parseDescription([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if d.Tools[0].Name != "a" || string(d.Tools[0].InputSchema) != `{"type":"object"}` || d.Tools[0].spec().Timeout != 50*time.Millisecond ||
		string(d.Validators[0].Schema) != `{}` || len(schemas) != 3 {
		t.Fatalf("description %+v, %d schemas", d, len(schemas))
	}
	for _, bad := range []string{``, `[]`, `{"abi":"1.0"}`, `{"abi":"one"}`, `{"abi":"1.0","tools":[{"name":"x","effect":"read","input_schema":{"$ref":"http://evil/"}}]}`} {
		if _, _, err := parseDescription([]byte(bad)); err == nil {
			t.Errorf("accepted %s", bad)
		}
	}
}

// FuzzParseDescription: describe's output is untrusted; parsing it never
// panics, and what it accepts is consistent.
func FuzzParseDescription(f *testing.F) {
	f.Add([]byte(`{"abi":"1.0","tools":[{"name":"t","input_schema":{"type":"object","properties":{"a":{"type":"string"}}},"effect":"read"}]}`))
	f.Add([]byte(`{"abi":"1.0","validators":[{"name":"v","schema":{"type":"array","items":{"$ref":"#/$defs/x"},"$defs":{"x":{"type":"integer"}}}}]}`))
	f.Add([]byte(`{"abi":"1.9","policies":[{"name":"p"}],"tools":[]}`))
	f.Add([]byte(`{"error":"nope"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, schemas, err := parseDescription(data)
		if err != nil {
			return
		}
		if len(schemas) != len(d.Tools)+len(d.Validators) {
			t.Fatalf("%d schemas for %d tools and %d validators", len(schemas), len(d.Tools), len(d.Validators))
		}
		for _, tool := range d.Tools {
			if !host.ValidToolName(tool.Name) {
				t.Fatalf("accepted tool name %q", tool.Name)
			}
		}
	})
}

// TestKernelCallReachesModules pins the one place the runtime reaches into
// go-sdk's unexported state: the kernel and main module of an instance,
// which calls without per-call lookups need. If an upgrade of go-sdk moves
// them, calls fall back to go-sdk's own path (slower, allocating a call
// engine per kernel function) and this test says so.
func TestKernelCallReachesModules(t *testing.T) {
	// A module of one export, "run", that returns 7 without touching the
	// kernel.
	wasm := []byte{0, 'a', 's', 'm', 1, 0, 0, 0,
		1, 5, 1, 0x60, 0, 1, 0x7f, // type 0: () -> i32
		3, 2, 1, 0, // func 0: type 0
		7, 7, 1, 3, 'r', 'u', 'n', 0, 0, // export "run" = func 0
		10, 6, 1, 4, 0, 0x41, 7, 0x0b, // body: i32.const 7
	}
	rt, err := NewRuntime(Options{CompileInProcess: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Close(context.Background())
	m, err := rt.Load(context.Background(), Source{Name: "run", Wasm: wasm})
	if err != nil {
		t.Fatal(err)
	}
	in := <-m.pool.idle
	if in.fast == nil {
		t.Fatal("go-sdk's Plugin no longer keeps its kernel and main module where this runtime reaches them (fields extism and mainModule): update newKernelCall")
	}
	for i := range 3 { // the first through go-sdk, then through the cached functions
		rc, out, err := in.call(context.Background(), "run", []byte("in"))
		if rc != 7 || err != nil || len(out) != 0 {
			t.Fatalf("call %d: rc %d, output %q, %v", i, rc, out, err)
		}
	}
	m.pool.put(in)
}

// TestExecutableID: the build that names kept modules is the binary's Go
// build ID, as go tool buildid reads it.
func TestExecutableID(t *testing.T) {
	exe, err := os.Executable() // not /proc/self/exe: that is go's own to go tool buildid
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "buildid", exe).Output()
	if err != nil {
		t.Skipf("go tool buildid: %v", err)
	}
	want := strings.TrimSpace(string(out))
	if got := goBuildID(exe); got != want || executableID() != "go:"+want {
		t.Errorf("goBuildID %q, executableID %q, want %q", got, executableID(), want)
	}
	if id := goBuildID("/dev/null"); id != "" {
		t.Errorf("the build ID of an empty file: %q", id)
	}
}
