package cli

import (
	"flag"
	"io"
	"log/slog"

	"github.com/agentichost/agentic/host"
)

// Every subcommand logs to stderr through one logger, which its
// --log-level and --log-format flags (registered by newFlags) shape; chat
// and task also print the live events of their runs there with --logs.

// addLogFlags registers --log-level and --log-format on fs.
func addLogFlags(fs *flag.FlagSet) {
	fs.String("log-level", "warn", "log on stderr from `LEVEL`: debug, info, warn, error")
	fs.String("log-format", "text", "log lines on stderr as `FORMAT`: text or json")
}

// setLogLevelDefault makes level the default of fs's --log-level.
func setLogLevelDefault(fs *flag.FlagSet, level string) {
	f := fs.Lookup("log-level")
	f.DefValue = level
	f.Value.Set(level)
}

// logLevel returns the level fs's --log-level names.
func logLevel(fs *flag.FlagSet) (slog.Level, error) {
	var level slog.Level
	v := fs.Lookup("log-level").Value.String()
	if err := level.UnmarshalText([]byte(v)); err != nil {
		return 0, fail(2, "--log-level %q: want debug, info, warn or error", v)
	}
	return level, nil
}

// logHandler returns a handler writing to w at level in fs's --log-format.
func logHandler(fs *flag.FlagSet, w io.Writer, level slog.Leveler) (slog.Handler, error) {
	opts := &slog.HandlerOptions{Level: level}
	switch v := fs.Lookup("log-format").Value.String(); v {
	case "text":
		return slog.NewTextHandler(w, opts), nil
	case "json":
		return slog.NewJSONHandler(w, opts), nil
	default:
		return nil, fail(2, "--log-format %q: want text or json", v)
	}
}

// newLogger returns the logger fs's flags ask for, writing to env.Stderr.
// It is also made the process's default logger, so that what logs through
// slog.Default (the storage adapters, go-redis's debug lines) follows the
// flags too.
func newLogger(fs *flag.FlagSet, env Env) (*slog.Logger, error) {
	level, err := logLevel(fs)
	if err != nil {
		return nil, err
	}
	h, err := logHandler(fs, env.Stderr, level)
	if err != nil {
		return nil, err
	}
	l := slog.New(h)
	slog.SetDefault(l)
	return l, nil
}

// eventPrinter returns an Options.OnEvent that writes one line per live
// event to env.Stderr in fs's --log-format, whatever the --log-level: the
// host's own event logger (host.LogEvents).
func eventPrinter(fs *flag.FlagSet, env Env) (func(host.Event), error) {
	h, err := logHandler(fs, env.Stderr, slog.LevelInfo)
	if err != nil {
		return nil, err
	}
	return host.LogEvents(slog.New(h)), nil
}
