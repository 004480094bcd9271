package redis

import (
	"slices"
	"testing"
	"time"
)

func TestParseClusterURL(t *testing.T) {
	for _, tc := range []struct {
		url      string
		addrs    []string
		user     string
		pass     string
		tls      bool
		readTime time.Duration
	}{
		{url: "redis+cluster://h1:7000", addrs: []string{"h1:7000"}},
		{url: "redis+cluster://h1:7000,h2:7001,h3", addrs: []string{"h1:7000", "h2:7001", "h3:6379"}},
		{url: "redis+cluster://u:p@h1:1,h2:2/0?read_timeout=4s", addrs: []string{"h1:1", "h2:2"}, user: "u", pass: "p", readTime: 4 * time.Second},
		{url: "rediss+cluster://h1:1/?addr=h9:9", addrs: []string{"h1:1", "h9:9"}, tls: true},
		{url: "redis+cluster://[::1]:7000,[::1]:7001", addrs: []string{"[::1]:7000", "[::1]:7001"}},
	} {
		o, err := parseClusterURL(tc.url)
		if err != nil {
			t.Errorf("parseClusterURL(%s): %v", tc.url, err)
			continue
		}
		slices.Sort(o.Addrs)
		if !slices.Equal(o.Addrs, tc.addrs) {
			t.Errorf("parseClusterURL(%s): addrs %q, want %q", tc.url, o.Addrs, tc.addrs)
		}
		if o.Username != tc.user || o.Password != tc.pass {
			t.Errorf("parseClusterURL(%s): user %q password %q, want %q %q", tc.url, o.Username, o.Password, tc.user, tc.pass)
		}
		if (o.TLSConfig != nil) != tc.tls {
			t.Errorf("parseClusterURL(%s): TLS %v, want %v", tc.url, o.TLSConfig != nil, tc.tls)
		}
		if o.ReadTimeout != tc.readTime {
			t.Errorf("parseClusterURL(%s): read timeout %v, want %v", tc.url, o.ReadTimeout, tc.readTime)
		}
	}
	for _, bad := range []string{"redis+cluster://", "redis+cluster://h1/2", "redis+cluster://h1?nope=1", "redis+cluster://h1#x"} {
		if _, err := parseClusterURL(bad); err == nil {
			t.Errorf("parseClusterURL(%s): no error", bad)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:secret@h:1/0":          `"redis://u:xxxxx@h:1/0"`,
		"redis://:secret@h:1":             `"redis://:xxxxx@h:1"`,
		"redis://u@h:1/0?x=a@b":           `"redis://u@h:1/0?x=a@b"`,
		"redis+cluster://u:p@h1:1,h2:2/0": `"redis+cluster://u:xxxxx@h1:1,h2:2/0"`,
		"nonsense":                        `"nonsense"`,
	} {
		if got := redact(in); got != want {
			t.Errorf("redact(%s) = %s, want %s", in, got, want)
		}
	}
}

func TestCompareID(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"0-0", "0-0", 0},
		{"1-0", "0-9", 1},
		{"9-0", "10-0", -1}, // numerically, not as strings
		{"5-10", "5-9", 1},
		{"1717243200000-3", "1717243200000-3", 0},
	} {
		if got := compareID(tc.a, tc.b); got != tc.want {
			t.Errorf("compareID(%s, %s) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}

func TestOwnParams(t *testing.T) {
	for _, tc := range []struct {
		url, rest string
		replicas  int
		timeout   time.Duration
		watchPool int
		wantErr   bool
		opt       Options
	}{
		{url: "redis://h:1/0", rest: "redis://h:1/0"},
		{url: "redis://h:1/0?pool_size=3", rest: "redis://h:1/0?pool_size=3"},
		{url: "redis://h:1/0?wait_replicas=2&wait_timeout=250ms", rest: "redis://h:1/0", replicas: 2, timeout: 250 * time.Millisecond},
		{url: "redis+cluster://a:1,b:2?wait_replicas=1&pool_size=3", rest: "redis+cluster://a:1,b:2?pool_size=3", replicas: 1},
		{url: "redis://h:1/0?wait_replicas=2", rest: "redis://h:1/0", opt: Options{Replicas: 5}, replicas: 5},
		{url: "redis://h:1/0?wait_replicas=x", wantErr: true},
		{url: "redis://h:1/0?wait_replicas=-1", wantErr: true},
		{url: "redis://h:1/0?wait_timeout=soon", wantErr: true},
		{url: "redis://h:1/0?watch_pool_size=7&pool_size=3", rest: "redis://h:1/0?pool_size=3", watchPool: 7},
		{url: "redis://h:1/0?watch_pool_size=7", rest: "redis://h:1/0", opt: Options{WatchPoolSize: 9}, watchPool: 9},
		{url: "redis://h:1/0?watch_pool_size=0", wantErr: true},
		{url: "redis://h:1/0?watch_pool_size=many", wantErr: true},
	} {
		opts := tc.opt
		rest, err := ownParams(tc.url, &opts)
		if (err != nil) != tc.wantErr {
			t.Errorf("%s: %v", tc.url, err)
			continue
		}
		if tc.wantErr {
			continue
		}
		if rest != tc.rest || opts.Replicas != tc.replicas || opts.ReplicaTimeout != tc.timeout || opts.WatchPoolSize != tc.watchPool {
			t.Errorf("%s: %q, replicas %d, timeout %v, watch pool %d; want %q, %d, %v, %d", tc.url, rest, opts.Replicas, opts.ReplicaTimeout, opts.WatchPoolSize, tc.rest, tc.replicas, tc.timeout, tc.watchPool)
		}
	}
}
