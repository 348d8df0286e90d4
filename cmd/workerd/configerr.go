package main

import (
	"reflect"

	"github.com/fenceq/fenceq/internal/yamlerr"
)

// configSchema names the config file's Go types in yamlerr's messages.
var configSchema = &yamlerr.Schema{
	Package: "main",
	Types: map[string]reflect.Type{
		"fileConfig": reflect.TypeFor[fileConfig](), "poolConfig": reflect.TypeFor[poolConfig](),
		"retentionConfig": reflect.TypeFor[retentionConfig](), "periodicConfig": reflect.TypeFor[periodicConfig](),
		"queueConfig": reflect.TypeFor[queueConfig](), "backoffConfig": reflect.TypeFor[backoffConfig](),
		"handlerConfig": reflect.TypeFor[handlerConfig](), "execConfig": reflect.TypeFor[execConfig](),
		"httpConfig": reflect.TypeFor[httpConfig](), "unknownKindConfig": reflect.TypeFor[unknownKindConfig](),
	},
	Names: map[string]string{
		"fileConfig": "the top level", "poolConfig": "a pool", "retentionConfig": "retention",
		"periodicConfig": "a periodic job", "queueConfig": "a queue", "backoffConfig": "backoff",
		"handlerConfig": "a handler", "execConfig": "exec", "httpConfig": "http", "unknownKindConfig": "unknown_kind",
	},
	Wanted: map[string]string{
		"[]main.queueConfig":            "a list of queues, like [default, {name: mail, weight: 3}]",
		"[]main.poolConfig":             "a list of pools, each item starting with '- ', like\n  pools:\n    - queues: [default]",
		"[]main.periodicConfig":         "a list of periodic jobs, each item starting with '- '",
		"map[string]main.handlerConfig": "a map from job kind to handler, like\n  handlers:\n    send_email: {exec: {command: [./send-email]}}",
	},
}

// fileError turns what loading file found into one configError.
func fileError(file string, idx yamlerr.Index, err error) error {
	return &configError{configSchema.Error(file, idx, err)}
}

// syntaxError explains a file the YAML parser refused, as a configError.
func syntaxError(file string, data []byte, err error) error {
	return &configError{yamlerr.SyntaxError(file, data, err)}
}
