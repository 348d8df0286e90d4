package main

import (
	"flag"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lmittmann/tint"
)

type logFlags struct{ format, level string }

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "auto", "log format: auto (colour text on a terminal, JSON otherwise), text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

// logger builds the logger the flags ask for, writing to w.
func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usagef("bad --log-level %q: want debug, info, warn or error", l.level)
	}
	switch l.format {
	case "auto":
		if isTerminal(w) {
			return slog.New(tint.NewTextHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly})), nil
		}
		return slog.New(slog.NewJSONHandler(w, jsonOptions(level))), nil
	case "text":
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: level, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)})), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, jsonOptions(level))), nil
	}
	return nil, usagef("bad --log-format %q: want auto, text or json", l.format)
}

// jsonOptions are the JSON logs' options: a duration is written as Go
// writes it, "1.5s", which a person and a log query both read, where
// slog's JSON handler would write nanoseconds, 1500000000.
func jsonOptions(level slog.Level) *slog.HandlerOptions {
	return &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
