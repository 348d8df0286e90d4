package worker

import (
	"fmt"
	"go/build"
	"reflect"
	"strings"
	"testing"

	"github.com/fenceq/fenceq/broker"
)

// The pool reaches Redis only through the broker package (see the package
// doc): none of its files imports a Redis client.
func TestWorkerImportsNoRedisClient(t *testing.T) {
	pkg, err := build.ImportDir(".", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, imp := range pkg.Imports {
		if strings.Contains(imp, "go-redis") || strings.Contains(imp, "redis/") {
			t.Errorf("package worker imports %s; it must reach Redis through broker", imp)
		}
	}
}

// Each service holds what it uses, not the pool: no field of a service,
// or of anything of this package it holds, is the Pool, the broker, or
// one of the broker's views; what it calls of those it reaches through an
// interface of this package of a few methods, defined beside it.
func TestServicesHoldNoPool(t *testing.T) {
	for _, s := range []reflect.Type{
		reflect.TypeFor[dispatcher](), reflect.TypeFor[maintenance](), reflect.TypeFor[heartbeat](),
		reflect.TypeFor[acker](), reflect.TypeFor[scheduler](), reflect.TypeFor[relay](), reflect.TypeFor[registry](),
	} {
		for _, p := range reachesPool(s) {
			t.Errorf("%s: %s", s.Name(), p)
		}
	}
	// The check itself finds a pool, however deep.
	type params struct{ p *Pool }
	type wide interface {
		a()
		b()
		c()
		d()
		e()
	}
	type service struct {
		loop
		params
		held []map[string]*broker.Leases
		w    wide
	}
	_ = service{loop: loop{}, params: params{p: nil}, held: nil, w: nil} // only reflection reads it
	if got := reachesPool(reflect.TypeFor[service]()); len(got) != 3 {
		t.Errorf("the check found %q in a service holding a pool, a Leases and a wide interface", got)
	}
}

// reachesPool says which fields of ty, followed into the types of this
// package it holds, are the pool, the broker or its views, or an
// interface of this package too wide to be a service's own.
func reachesPool(ty reflect.Type) []string {
	forbidden := map[reflect.Type]bool{
		reflect.TypeFor[Pool](): true, reflect.TypeFor[*Pool](): true,
		reflect.TypeFor[*broker.Broker](): true, reflect.TypeFor[*broker.Leases](): true,
		reflect.TypeFor[*broker.Client](): true, reflect.TypeFor[*broker.Inspector](): true,
	}
	const maxMethods = 4
	pkg := reflect.TypeFor[Pool]().PkgPath()
	var found []string
	seen := map[reflect.Type]bool{}
	var walk func(path string, ty reflect.Type)
	walk = func(path string, ty reflect.Type) {
		if forbidden[ty] {
			found = append(found, fmt.Sprintf("%s is a %v; give the service what it uses instead", path, ty))
			return
		}
		if seen[ty] || ty.PkgPath() != pkg && ty.Name() != "" {
			return // seen, or another package's type: its insides are not ours
		}
		seen[ty] = true
		switch ty.Kind() {
		case reflect.Struct:
			for i := range ty.NumField() {
				f := ty.Field(i)
				walk(path+"."+f.Name, f.Type)
			}
		case reflect.Pointer, reflect.Slice, reflect.Array, reflect.Chan:
			walk(path, ty.Elem())
		case reflect.Map:
			walk(path, ty.Key())
			walk(path, ty.Elem())
		case reflect.Interface:
			if ty.NumMethod() > maxMethods {
				found = append(found, fmt.Sprintf("%s is %v, an interface of %d methods; hold a smaller one", path, ty, ty.NumMethod()))
			}
		}
	}
	walk(ty.Name(), ty)
	return found
}
