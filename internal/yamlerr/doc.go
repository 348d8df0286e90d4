// Package yamlerr turns what a YAML parser and a config loader find wrong
// into messages that name the file, the line, the field (pools[0].lease) and
// the fix, without the parser's Go type names. A loader indexes the parsed
// file with NewIndex, reports its own checks as Fieldf or Nodef errors, and
// passes every error through a Schema's Error (or SyntaxError, for a file
// that does not parse).
package yamlerr
