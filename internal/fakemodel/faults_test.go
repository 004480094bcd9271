package fakemodel

import (
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
)

func TestParseFaults(t *testing.T) {
	tests := []struct {
		spec    string
		want    FaultSpec
		wantErr string
	}{
		{"", FaultSpec{}, ""},
		{"rate=0.3,kinds=429+500+sever+stall,seed=7",
			FaultSpec{Rate: 0.3, Kinds: []FaultKind{FaultRateLimit, FaultServerError, FaultSever, FaultStall}, Seed: 7}, ""},
		{" seed=-3 , rate=25% , kinds=drop|errorchunk ", FaultSpec{Rate: 0.25, Kinds: []FaultKind{FaultDrop, FaultErrorChunk}, Seed: -3}, ""},
		{"kinds=400+midstream+502+503+402+401+nofinish+finisherror+status",
			FaultSpec{Kinds: []FaultKind{FaultContextOverflow, FaultErrorChunk, FaultBadGateway, FaultNoProvider,
				FaultNoCredits, FaultUnauthorized, FaultNoFinish, FaultFinishError, FaultStatus}}, ""},
		{"rate=1,kinds=all", FaultSpec{Rate: 1, Kinds: allFaultKinds()}, ""},
		{"rate=2", FaultSpec{}, "want 0..1"},
		{"rate=x", FaultSpec{}, "not a number"},
		{"kinds=429+boom", FaultSpec{}, `unknown fault kind "boom"`},
		{"kinds=", FaultSpec{}, "empty list"},
		{"seed=1.5", FaultSpec{}, "not an integer"},
		{"color=red", FaultSpec{}, "unknown key"},
		{"rate", FaultSpec{}, "want key=value"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := ParseFaults(tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
			// String round-trips.
			again, err := ParseFaults(got.String())
			if err != nil || !reflect.DeepEqual(again, got) {
				t.Errorf("round trip of %q: %+v, %v", got.String(), again, err)
			}
		})
	}
}

func TestFaultKindNames(t *testing.T) {
	for _, k := range append(allFaultKinds(), FaultStatus) {
		got, err := ParseFaultKind(k.String())
		if err != nil || got != k {
			t.Errorf("%v: %v, %v", k, got, err)
		}
	}
	if s := FaultKind(99).String(); s != "FaultKind(99)" {
		t.Errorf("unknown kind prints %q", s)
	}
}

// outcomes sends n non-streaming requests and describes each answer.
func outcomes(t *testing.T, s *Server, n int) []string {
	t.Helper()
	ts := httptest.NewServer(s)
	defer ts.Close()
	var out []string
	for range n {
		res, err := http.Post(ts.URL+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"m","messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			out = append(out, "transport error")
			continue
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		switch {
		case err != nil:
			out = append(out, "truncated")
		case res.StatusCode != 200:
			out = append(out, strconv.Itoa(res.StatusCode))
		default:
			i := strings.Index(string(b), `"content":"`)
			out = append(out, string(b[i+11:i+11+strings.Index(string(b[i+11:]), `"`)]))
		}
	}
	return out
}

func TestRandomFaultsDeterministic(t *testing.T) {
	opts := func(seed int64) Options {
		return Options{FaultRate: 0.5, FaultKinds: []FaultKind{FaultRateLimit, FaultServerError, FaultSever, FaultDrop}, Seed: seed,
			Script: []Reply{{Text: "s1"}, {Text: "s2"}, {Text: "s3"}}}
	}
	a := outcomes(t, New(opts(7)), 24)
	b := outcomes(t, New(opts(7)), 24)
	c := outcomes(t, New(opts(8)), 24)
	if !reflect.DeepEqual(a, b) {
		t.Errorf("same seed, different outcomes:\n%q\n%q", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Errorf("seeds 7 and 8 gave the same outcomes %q", a)
	}
	// Random faults never consume a scripted reply: the successes are s1, s2,
	// s3 and then the default echo, in order.
	var ok []string
	kinds := map[string]bool{}
	for _, o := range a {
		switch o {
		case "429", "500", "truncated", "transport error":
			kinds[o] = true
		default:
			ok = append(ok, o)
		}
	}
	if len(ok) < 4 || !reflect.DeepEqual(ok[:4], []string{"s1", "s2", "s3", "You said: hi"}) {
		t.Errorf("successes %q", ok)
	}
	if len(kinds) < 3 {
		t.Errorf("only fault kinds %v in %q", kinds, a)
	}
}

func TestFaultRateBounds(t *testing.T) {
	never := outcomes(t, New(Options{Seed: 1}), 5)
	for _, o := range never {
		if o != "You said: hi" {
			t.Fatalf("rate 0 gave %q", never)
		}
	}
	s := New(Options{FaultRate: 1, FaultKinds: []FaultKind{FaultNoProvider}, Script: []Reply{{Text: "kept"}}})
	for _, o := range outcomes(t, s, 5) {
		if o != "503" {
			t.Fatalf("rate 1 gave %q", o)
		}
	}
	if s.Pending() != 1 || s.RequestCount() != 5 {
		t.Errorf("pending %d, requests %d", s.Pending(), s.RequestCount())
	}
}

func TestDefaultFaultKinds(t *testing.T) {
	s := New(Options{FaultRate: 1})
	if !reflect.DeepEqual(s.opts.FaultKinds, DefaultFaultKinds()) {
		t.Errorf("kinds %v", s.opts.FaultKinds)
	}
	var o Options
	fs, _ := ParseFaults("rate=0.3,kinds=429+stall,seed=7")
	fs.Apply(&o)
	if o.FaultRate != 0.3 || o.Seed != 7 || !reflect.DeepEqual(o.FaultKinds, []FaultKind{FaultRateLimit, FaultStall}) {
		t.Errorf("Apply: %+v", o)
	}
}
