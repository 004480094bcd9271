package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/agentichost/agentic/storage"
	"github.com/agentichost/agentic/storage/file"
	"github.com/agentichost/agentic/storage/memory"
	"github.com/agentichost/agentic/storage/redis"
	goredis "github.com/redis/go-redis/v9"
)

// quietRedis routes go-redis's own log lines (connection-pool events it
// also reports through errors, or that are benign, such as a connection
// closed while a watch used it at exit) to debug logs instead of the
// terminal.
var quietRedis sync.Once

type redisLog struct{}

func (redisLog) Printf(ctx context.Context, format string, v ...any) {
	slog.Default().DebugContext(ctx, fmt.Sprintf(format, v...), "source", "go-redis")
}

// DefaultStorage is the storage URL of the embedded default: JSONL files
// under .agentic in the working directory.
const DefaultStorage = "file:.agentic"

// openStorage opens the store a storage URL names:
//
//	memory:          in-process, gone at exit
//	file:DIR         JSONL files under DIR (file:.agentic by default)
//	file:DIR?fsync=1 the same, fsynced after every append
//	redis://HOST:PORT/DB, rediss://…, redis+cluster://H1:P1,H2:P2
//	                 Redis Streams, shared by several hosts
func openStorage(url string) (storage.Storage, func() error, error) {
	scheme, rest, ok := strings.Cut(url, ":")
	if !ok {
		return nil, nil, fmt.Errorf("storage %q: want memory:, file:DIR or redis://HOST:PORT", url)
	}
	switch scheme {
	case "redis", "rediss", "redis+cluster", "rediss+cluster":
		quietRedis.Do(func() { goredis.SetLogger(redisLog{}) })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s, err := redis.Open(ctx, url, redis.Options{})
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	case "memory":
		if rest != "" {
			return nil, nil, fmt.Errorf("storage %q: memory: takes no path", url)
		}
		s := memory.New()
		return s, s.Close, nil
	case "file":
		dir, query, _ := strings.Cut(rest, "?")
		dir = strings.TrimPrefix(dir, "//")
		if dir == "" {
			return nil, nil, fmt.Errorf("storage %q: file: needs a directory, e.g. file:.agentic", url)
		}
		var opts file.Options
		switch query {
		case "":
		case "fsync=1", "fsync=true":
			opts.Fsync = true
		default:
			return nil, nil, fmt.Errorf("storage %q: unknown option %q (known: fsync=1)", url, query)
		}
		s, err := file.Open(dir, opts)
		if err != nil {
			return nil, nil, err
		}
		return s, s.Close, nil
	default:
		return nil, nil, fmt.Errorf("storage %q: unknown scheme %q (known: memory:, file:DIR, redis://, rediss://, redis+cluster://)", url, scheme)
	}
}
