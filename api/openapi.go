package api

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3 document of the API, written by hand.
// TestOpenAPIMatchesRoutes and TestOpenAPIMatchesTypes fail when a route
// or a field of a request or answer is missing from it or extra in it.
//
//go:embed openapi.json
var openAPI []byte

// OpenAPI answers the API's OpenAPI 3 document, as served at
// /v1/openapi.json.
func OpenAPI() []byte { return append([]byte(nil), openAPI...) }

// serveOpenAPI serves GET /v1/openapi.json, without the token: it tells
// nothing of the queues.
func serveOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(openAPI)
}
