package redis_test

import (
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/agentichost/agentic/internal/redistest"
	"github.com/agentichost/agentic/ledger"
	"github.com/agentichost/agentic/storage/redis"
	"github.com/agentichost/agentic/storage/storagetest"
)

// latencies collects per-operation timings and reports their percentiles.
type latencies []time.Duration

func (l latencies) report(b *testing.B, prefix string) {
	if len(l) == 0 {
		return
	}
	slices.Sort(l)
	b.ReportMetric(l.at(50), prefix+"p50-us")
	b.ReportMetric(l.at(99), prefix+"p99-us")
}

// BenchmarkAppend appends one typical step event per operation to a
// redis-server without persistence (--appendonly no), on one connection at
// a time, and reports the percentiles of the per-operation latency beside
// ns/op and allocations:
//
//   - store: Store.Append (encode, EVALSHA of the append script: lease
//     check, idempotence check, XADD, ZADD of the index);
//
//   - xadd: a bare XADD of the same encoded event through go-redis, the
//     floor of any append over this client;
//
//   - store-vs-xadd: the two alternating in one loop, and the ratios of
//     their percentiles (p50-store/xadd, p99-store/xadd);
//
// and, when redis-benchmark is on PATH, what redis-benchmark measures on
// the same server for XADD of the same payload with one client
// (redis-benchmark-p50-us, redis-benchmark-p99-us): the floor without Go.
func BenchmarkAppend(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	enc, err := ledger.Encode(storagetest.TypicalStep())
	if err != nil {
		b.Fatal(err)
	}
	b.Run("store", func(b *testing.B) {
		storagetest.BenchmarkAppend(b, open(b, srv.URL(), redis.Options{Prefix: freshPrefix()}))
		redisBenchmark(b, srv, enc)
	})
	b.Run("xadd", func(b *testing.B) {
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		defer c.Close()
		ctx := b.Context()
		lat := make(latencies, 0, 1<<16)
		args := &goredis.XAddArgs{Stream: "bench:xadd", Values: []any{"e", enc}}
		b.SetBytes(int64(len(enc)))
		b.ReportAllocs()
		for b.Loop() {
			t0 := time.Now()
			if err := c.XAdd(ctx, args).Err(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(t0))
		}
		lat.report(b, "")
	})
	b.Run("store-vs-xadd", func(b *testing.B) {
		// Both in one loop, alternating, so that the machine's noise falls
		// on both alike: the ratios are the figures to read.
		st := open(b, srv.URL(), redis.Options{Prefix: freshPrefix()})
		c := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
		defer c.Close()
		ctx := b.Context()
		step := storagetest.TypicalStep()
		if err := st.Append(ctx, "append", step); err != nil {
			b.Fatal(err)
		}
		args := &goredis.XAddArgs{Stream: "bench:vs", Values: []any{"e", enc}}
		store, xadd := make(latencies, 0, 1<<16), make(latencies, 0, 1<<16)
		for b.Loop() {
			t0 := time.Now()
			if err := st.Append(ctx, "append", step); err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			if err := c.XAdd(ctx, args).Err(); err != nil {
				b.Fatal(err)
			}
			store, xadd = append(store, t1.Sub(t0)), append(xadd, time.Since(t1))
		}
		if len(store) == 0 {
			return
		}
		store.report(b, "store-")
		xadd.report(b, "xadd-")
		b.ReportMetric(store.at(50)/xadd.at(50), "p50-store/xadd")
		b.ReportMetric(store.at(99)/xadd.at(99), "p99-store/xadd")
	})
}

// at returns the p-th percentile of sorted latencies, in µs.
func (l latencies) at(p int) float64 {
	return float64(l[min(len(l)-1, len(l)*p/100)].Nanoseconds()) / 1e3
}

// redisBenchmark runs redis-benchmark on the server, one client, XADD of
// payload, and reports its p50 and p99. It does nothing when
// redis-benchmark is not on PATH.
func redisBenchmark(b *testing.B, srv *redistest.Server, payload []byte) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Log("redis-benchmark is not on PATH: no comparison")
		return
	}
	out, err := exec.CommandContext(b.Context(), bin, "-h", "127.0.0.1", "-p", strconv.Itoa(srv.Port()),
		"-n", "20000", "-c", "1", "--csv", "XADD", "bench:redis-benchmark", "*", "e", string(payload)).Output()
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	p50, p99, err := parseRedisBenchmarkCSV(out)
	if err != nil {
		b.Fatalf("redis-benchmark: %v\n%s", err, out)
	}
	b.ReportMetric(p50*1e3, "redis-benchmark-p50-us")
	b.ReportMetric(p99*1e3, "redis-benchmark-p99-us")
}

// parseRedisBenchmarkCSV returns the p50 and p99 latencies, in ms, of the
// last test of redis-benchmark --csv output. The test's name (the command)
// is not escaped, so fields are counted from the end of the line:
// …,"p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms".
func parseRedisBenchmarkCSV(out []byte) (p50, p99 float64, err error) {
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 || !strings.Contains(lines[0], "p99_latency_ms") {
		return 0, 0, fmt.Errorf("unexpected output")
	}
	f := strings.Split(lines[len(lines)-1], ",")
	if len(f) < 7 {
		return 0, 0, fmt.Errorf("unexpected line %q", lines[len(lines)-1])
	}
	num := func(s string) (float64, error) { return strconv.ParseFloat(strings.Trim(s, `"`), 64) }
	if p50, err = num(f[len(f)-4]); err == nil {
		p99, err = num(f[len(f)-2])
	}
	return p50, p99, err
}

// BenchmarkLoad10k loads a session of 10,000 events (steps, tool results
// and tool starts, appended one at a time and in batches of three), read
// in pages of 1000 entries.
func BenchmarkLoad10k(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	st := open(b, srv.URL(), redis.Options{})
	storagetest.BenchmarkLoad(b, st, 10_000)
}

// BenchmarkKV gets and sets values of one namespace's hash.
func BenchmarkKV(b *testing.B) {
	srv := redistest.Start(b, redistest.Options{})
	storagetest.BenchmarkKV(b, open(b, srv.URL(), redis.Options{}))
}
